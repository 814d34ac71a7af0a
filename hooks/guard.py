"""The wiring guard, inside the serving process: with a training manifest named to it, the engine's
wiring at start-up (the hello its adapter builds from the live objects) is judged by the findings
engine, as ``check`` would judge it, before the first request is served. In ``stop`` mode (the
default) an error finding (the layer ids not read, the layer map, the width, a known defect of this
release, ...) stops the server: each finding and its fix go to the engine's own log, and start-up
fails (SGLang: the scheduler raises, so the launcher exits non-zero; the built-in engine: exit status
``EXIT_REFUSED``). In ``warn`` mode the findings are logged and the server serves.

Opt-in, and the only part of the serving process that loads the analysis (the manifest reader and
the findings engine), and only once the guard is on.

Environment (the plugin's other settings are ``EAGLE3_TOP_*`` too):
- ``EAGLE3_TOP_GUARD_MANIFEST``: the training manifest (``eagle3-top manifest build``).
- ``EAGLE3_TOP_GUARD``: ``stop`` (default) or ``warn``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eagle3_top.tracer.analysis.findings import Finding
    from eagle3_top.tracer.schema import Hello

ENV_MANIFEST = "EAGLE3_TOP_GUARD_MANIFEST"
ENV_MODE = "EAGLE3_TOP_GUARD"
STOP, WARN = "stop", "warn"
EXIT_REFUSED = 78  # sysexits' EX_CONFIG: the built-in engine's status when the guard stops it
PREFIX = "eagle3-top guard"


class WiringRefused(RuntimeError):
    """The guard stopped the server: the message names every error finding and its fix."""


class GuardSettingError(ValueError):
    """The guard's own settings are wrong (one line)."""


@dataclass(frozen=True)
class Guard:
    manifest: str
    mode: str = STOP


def mode_from_env(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    mode = (env.get(ENV_MODE) or STOP).strip().lower()
    if mode not in (STOP, WARN):
        raise GuardSettingError(f"{ENV_MODE}={env.get(ENV_MODE)!r}: expected {STOP} or {WARN}")
    return mode


def from_env(env: Mapping[str, str] | None = None, manifest: str | None = None) -> Guard | None:
    """The guard the environment asks for (``manifest``: a flag that names the manifest instead);
    None when it is off."""
    env = os.environ if env is None else env
    path = manifest or env.get(ENV_MANIFEST)
    return Guard(path, mode_from_env(env)) if path else None


def refuser(why: str, log: logging.Logger) -> Callable[..., Any] | None:
    """The guard was asked for, but this server's wiring cannot be judged (a release we do not know,
    internals that differ): in stop mode an around-hook for the engine's start-up that refuses it,
    so the server never starts as if it had passed; None in warn mode or without a guard."""
    try:
        g = from_env()
    except GuardSettingError as exc:
        log.error("%s: %s", PREFIX, exc)
        g = Guard(os.environ.get(ENV_MANIFEST, ""))
    if g is None:
        return None
    log.error("%s: cannot check the wiring: %s", PREFIX, why)
    if g.mode != STOP:
        return None

    def refuse(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        raise WiringRefused(f"{PREFIX}: cannot check the wiring, not serving: {why}")

    return refuse


def judge_wiring(hello: Hello, manifest_path: str) -> list[Finding]:
    """The findings ``check`` would give this hello with that manifest, before any step."""
    from eagle3_top.tracer.analysis.diagnose import diagnose
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.analysis.manifest import load_manifest
    from eagle3_top.tracer.schema import HELLO, Event

    manifest = load_manifest(manifest_path)
    book = EvidenceBook(manifest=manifest)
    book.ingest([Event(HELLO, "guard", 0, 0.0, hello.to_body())], 0.0)
    return diagnose(book.sources["guard"], manifest)


def enforce(guard: Guard, hello: Hello | None, log: Callable[[str, str], None]) -> list[Finding]:
    """Judge ``hello``; log each finding (``log(level, line)``, level "error", "warning" or
    "info"). In stop mode raise ``WiringRefused`` on any error finding, on an unreadable manifest
    and on a hello that could not be read: the guard never lets a server through on evidence it did
    not see."""
    from eagle3_top.tracer.analysis.findings import ERROR
    from eagle3_top.tracer.analysis.manifest import ManifestError

    def refuse(why: str, detail: str = "") -> None:
        log("error" if guard.mode == STOP else "warning", f"{PREFIX}: {why}")
        if guard.mode == STOP:
            raise WiringRefused(f"{PREFIX}: {why}{detail}")

    if hello is None or hello.wiring_error is not None:
        refuse(
            f"the wiring could not be read ({hello.wiring_error if hello else 'no hello'}), so it cannot be checked"
        )
        return []
    try:
        findings = judge_wiring(hello, guard.manifest)
    except ManifestError as exc:
        refuse(f"cannot read the training manifest: {exc}")
        return []
    errors = [f for f in findings if f.severity == ERROR]
    for f in findings:
        level = f.severity if f.severity in ("error", "warning") else "info"
        if guard.mode == WARN and level == "error":
            level = "warning"
        log(level, f"{PREFIX}: {f.code}: {f.message} — fix: {f.fix}")
    if errors:
        codes = ", ".join(dict.fromkeys(f.code for f in errors))
        refuse(
            f"the wiring differs from training ({codes}); "
            + (
                "not serving (the findings and their fixes are above)"
                if guard.mode == STOP
                else "serving anyway (warn mode)"
            ),
            ": " + "; ".join(f"{f.code}: {f.message} — fix: {f.fix}" for f in errors),
        )
    else:
        log("info", f"{PREFIX}: the wiring matches the training manifest {guard.manifest}")
    return findings
