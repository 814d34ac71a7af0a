"""A target's and a draft's ``config.json`` read the way a serving engine reads them, checked field by
field: a value an engine would refuse at start-up, or read as something other than what it looks
like, stops ``preflight`` with one line naming the file and the field (exit 2), never a traceback, a
made-up width or a pass. Also the draft's ``fc`` width from its safetensors header (no tensor read).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle3_top.tracer.engines.base import MAX_IDS
from eagle3_top.tracer.files import open_regular

from .manifest import ManifestError, read_json

MAX_HEADER_BYTES = 16 << 20  # safetensors' own limit is 100 MB; a draft's header is a few KiB
# Bounds no real model comes near; past them a number is a typo or hostile, not a model.
MAX_LAYERS = 4096
MAX_HIDDEN = 1 << 20
MAX_VOCAB = 1 << 24


class ConfigError(Exception):
    """A model directory or one of its files cannot be what it should be; one line."""


def read_config(directory: str, what: str) -> dict[str, Any]:
    """A model directory's config.json as bounded, strict JSON; one line when it is not."""
    path = os.path.join(directory, "config.json")
    if not os.path.lexists(path):  # a dangling link is read_json's to name
        raise ConfigError(f"{what} {directory}: no config.json (is it a model directory?)")
    try:
        return read_json(path, f"{what} config")
    except ManifestError as exc:
        raise ConfigError(str(exc)) from None


def _field(cfg: Mapping[str, Any], key: str) -> tuple[Any, str]:
    """A field from the config or, for a multimodal target, its ``text_config`` (as engines read
    the language model's shape), and the name it was found under."""
    if key in cfg:
        return cfg[key], key
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and key in text:
        return text[key], f"text_config.{key}"
    return None, key


def _int(path: str, cfg: Mapping[str, Any], key: str, *, lo: int, hi: int, required: bool) -> int | None:
    v, name = _field(cfg, key)
    if v is None:
        if required:
            raise ConfigError(f"{path}: no {key} (the engine cannot build the model without it)")
        return None
    if type(v) is not int:
        raise ConfigError(f"{path}: {name} is {_said(v)}, not a whole number")
    if not lo <= v <= hi:
        raise ConfigError(f"{path}: {name} = {v} is outside {lo} – {hi}")
    return v


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, float):
        return "a number" if math.isfinite(v) else ("NaN" if math.isnan(v) else "Infinity")
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return "null" if v is None else type(v).__name__


def _said(v: Any) -> str:
    """``a string "8"``, ``a number 1e+308``, ``NaN``: what a value is, for one line."""
    return f"{_kind(v)} {_show(v)}".strip()


def _show(v: Any) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return ""  # said by _kind: NaN, Infinity
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class TargetConfig:
    arch: str
    num_layers: int
    hidden_size: int
    vocab_size: int | None


def check_target(cfg: Mapping[str, Any], directory: str) -> TargetConfig:
    path = os.path.join(directory, "config.json")
    archs = cfg.get("architectures")
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) and a for a in archs)):
        shown = "missing" if archs is None else f"{_kind(archs)} {_show(archs)}"
        raise ConfigError(
            f"{path}: architectures is {shown}, not a list of class names (the engine picks its model class by it)"
        )
    return TargetConfig(
        arch=archs[0][:200],
        num_layers=_int(path, cfg, "num_hidden_layers", lo=1, hi=MAX_LAYERS, required=True) or 0,
        hidden_size=_int(path, cfg, "hidden_size", lo=1, hi=MAX_HIDDEN, required=True) or 0,
        vocab_size=_int(path, cfg, "vocab_size", lo=1, hi=MAX_VOCAB, required=False),
    )


def check_draft(cfg: Mapping[str, Any], directory: str) -> list[str]:
    """The draft config's fields an engine reads for the aux wiring: refuse what it would refuse or
    silently misread; returns notes on what it reads in a way the file does not say plainly."""
    path = os.path.join(directory, "config.json")
    ec = cfg.get("eagle_config")
    if ec is not None and not isinstance(ec, Mapping):
        raise ConfigError(
            f"{path}: eagle_config is {_kind(ec)} {_show(ec)}, not an object: engines ignore it and serve "
            "their default layers"
        )
    for where, holder in (("eagle_config.", ec if isinstance(ec, Mapping) else {}), ("", cfg)):
        ids = holder.get("eagle_aux_hidden_state_layer_ids")
        if ids is None:
            continue
        name = f"{where}eagle_aux_hidden_state_layer_ids"
        if not isinstance(ids, list):
            raise ConfigError(f"{path}: {name} is {_kind(ids)} {_show(ids)}, not a list of layer ids")
        if len(ids) > MAX_IDS:
            raise ConfigError(f"{path}: {name} holds {len(ids)} ids, more than any target has layers")
        bad = [v for v in ids if type(v) is not int]
        if bad:
            raise ConfigError(
                f"{path}: {name} holds {_kind(bad[0])} {_show(bad[0])}, not a layer number "
                "(the engine fails at start-up adding 1 to it)"
            )
        if any(not -1 <= v <= MAX_LAYERS for v in ids):
            raise ConfigError(f"{path}: {name} = {_show(ids)} holds an id outside -1 – {MAX_LAYERS}")
    for key, hi in (
        ("draft_vocab_size", MAX_VOCAB),
        ("target_hidden_size", MAX_HIDDEN),
        ("hidden_size", MAX_HIDDEN),
    ):
        if key in cfg and cfg[key] is not None:
            _int(path, cfg, key, lo=1, hi=hi, required=False)
    notes = []
    use = ec.get("use_aux_hidden_state") if isinstance(ec, Mapping) else None
    if use is not None and not isinstance(use, bool):
        notes.append(
            f"eagle_config.use_aux_hidden_state is {_kind(use)} {_show(use)}, not true or false: engines read "
            f"it as {'true' if bool(use) else 'false'}"
        )
    return notes


def safetensors_shapes(directory: str) -> dict[str, list[int]]:
    """Tensor shapes from the headers of the directory's ``*.safetensors`` files (8-byte length,
    then JSON), without reading the tensors; empty when there are none."""
    shapes: dict[str, list[int]] = {}
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    except OSError:
        return shapes
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open_regular(path) as f:  # a FIFO among the weights must not hang preflight
                head = f.read(8)
                if len(head) != 8:
                    raise ConfigError(f"{path}: truncated safetensors header")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER_BYTES:
                    raise ConfigError(f"{path}: safetensors header of {n} bytes, not a model file")
                header = json.loads(f.read(n))
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ConfigError(f"{path}: unreadable safetensors header ({exc})") from None
        if not isinstance(header, dict):
            raise ConfigError(f"{path}: unreadable safetensors header")
        for key, info in header.items():
            if isinstance(info, dict) and isinstance(info.get("shape"), list):
                shapes[key] = [int(v) for v in info["shape"] if type(v) is int]
    return shapes


def draft_fc_width(draft_dir: str, dcfg: Mapping[str, Any], ids: list[int] | None) -> tuple[int | None, str]:
    """The input width of the draft's ``fc``: its weight's shape in the draft's safetensors, else
    what the engine's draft class sizes it from (``target_hidden_size`` or ``hidden_size`` × the
    number of ids, 3 without ids)."""
    for key, shape in safetensors_shapes(draft_dir).items():
        if key.split(".")[-2:] == ["fc", "weight"] and len(shape) == 2:
            return shape[1], f"{key} in the draft's safetensors"
    hidden = dcfg.get("target_hidden_size") or dcfg.get("hidden_size")
    if type(hidden) is not int:
        return None, "unknown: no fc weight and no hidden size in the draft's config"
    n = len(ids) if ids else 3
    return hidden * n, f"the draft config: {hidden} × {n} slots"
