"""The monitor's config file (TOML): defaults for its flags, the thresholds, the theme.

Where it is read from, first found wins: ``--config PATH``, ``$EAGLE3_TOP_CONFIG``,
``$XDG_CONFIG_HOME/eagle3-top/config.toml`` (``~/.config/eagle3-top/config.toml``). A value given on
the command line beats the file's; the file's beats the built-in default. A file named explicitly
(flag or variable) must exist; the default location may be absent. Unknown keys and wrong types are
errors, named in one line: a typo must not silently leave a gate at its default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eagle3_top.tracer.analysis.requests import INTERNAL_PREFIXES
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS, Thresholds
from eagle3_top.tracer.files import open_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_VAR = "EAGLE3_TOP_CONFIG"
MAX_BYTES = 1 << 20
THEMES = {"dark": "textual-dark", "light": "textual-light"}
# Seconds between the monitor's refreshes (-i, the file's "interval"): keys repaint at once whatever
# it is. A replay is watched, not left running: four a second.
LIVE_INTERVAL_S = 1.0
REPLAY_INTERVAL_S = 0.25


class ConfigError(ValueError):
    """One line naming the file and what is wrong in it."""


@dataclass(frozen=True)
class Config:
    path: str | None = None  # the file read, if any
    endpoints: tuple[str, ...] = ()
    manifest: str | None = None
    tokenizer: str | None = None
    interval: float | None = None
    baseline_tok_s: float | None = None
    record_dir: str | None = None
    theme: str = "dark"
    thresholds: Thresholds = THRESHOLDS
    internal_rid_prefixes: tuple[str, ...] = INTERNAL_PREFIXES
    keys: tuple[str, ...] = field(default=(), compare=False)  # the keys the file set


def default_path(env: Mapping[str, str] = os.environ) -> str:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "eagle3-top", "config.toml")


def find_config(explicit: str | None, env: Mapping[str, str] = os.environ) -> tuple[str | None, bool]:
    """The file to read and whether the user named it (then it must exist)."""
    if explicit:
        return explicit, True
    if env.get(ENV_VAR):
        return env[ENV_VAR], True
    path = default_path(env)
    return (path, False) if os.path.exists(path) else (None, False)


def load_config(explicit: str | None = None, env: Mapping[str, str] = os.environ) -> Config:
    path, named = find_config(explicit, env)
    if path is None:
        return Config()
    try:
        with open_regular(path) as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        if named:
            raise ConfigError(f"{path}: no such config file") from None
        return Config()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{path}: over {MAX_BYTES >> 20} MiB, not a config file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML: {exc}") from None
    try:
        return _config(path, data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


_TOP = {"endpoints", "manifest", "tokenizer", "interval", "baseline_tok_s", "record_dir", "theme",
        "thresholds", "requests"}  # fmt: skip


def _config(path: str, d: dict[str, Any]) -> Config:
    unknown = sorted(set(d) - _TOP)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_TOP))})")
    endpoints = d.get("endpoints", [])
    if isinstance(endpoints, str):
        endpoints = [endpoints]
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise ValueError("endpoints: expected a list of strings")
    theme = d.get("theme", "dark")
    if theme not in THEMES:
        raise ValueError(f"theme {theme!r}: expected one of {', '.join(THEMES)}")
    th = d.get("thresholds", {})
    if not isinstance(th, dict):
        raise ValueError("[thresholds]: expected a table")
    req = d.get("requests", {})
    if not isinstance(req, dict) or set(req) - {"internal_rid_prefixes"}:
        raise ValueError("[requests]: the one key is internal_rid_prefixes")
    prefixes = req.get("internal_rid_prefixes", list(INTERNAL_PREFIXES))
    if not isinstance(prefixes, list) or not all(isinstance(p, str) and p for p in prefixes):
        raise ValueError("requests.internal_rid_prefixes: expected a list of non-empty strings")
    return Config(
        path=path,
        endpoints=tuple(endpoints),
        manifest=_str(d, "manifest"),
        tokenizer=_str(d, "tokenizer"),
        interval=_num(d, "interval", 0.05, 60.0),
        baseline_tok_s=_num(d, "baseline_tok_s", 1e-9, float("inf")),
        record_dir=_str(d, "record_dir"),
        theme=theme,
        thresholds=Thresholds.from_table(th),
        internal_rid_prefixes=tuple(prefixes),
        keys=tuple(d),
    )


def _str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{key}: expected a string, got {type(v).__name__}")
    return os.path.expanduser(v) if v else None


def _num(d: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ValueError(f"{key} = {v!r}: expected a number between {lo:g} and {hi:g}")
    return float(v)
