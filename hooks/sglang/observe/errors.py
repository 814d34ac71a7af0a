"""Whose error is it? The table trusts every error that does not start with ``not observable on
CPU:`` as SGLang's, so:

- **SGLang's** (recorded as they come): everything from reading the draft's ids
  (``resolve_spec_aux_hidden_state_config``) on: building the target class, its post-load steps,
  ``set_eagle3_layers_to_capture``, the forward; and ``no model class: ...`` when the release's model
  registry does not know the architecture (checked first; the release's source is searched, so a
  class defined there but failing to import HERE is not mistaken for a missing one).
- **Ours** (``not observable on CPU: eagle3-top's harness failed at <step> ...``): any exception before
  SGLang's model code runs: finding the architecture's config, shrinking it, the shrunk draft
  config, ServerArgs from our launcher flags (SGLang's CPU platform checks fire there),
  ``ModelConfig`` of the shrunk target (a shrink inconsistency surfaces there), the attention
  data-parallel setup. A crash there on a GPU with the real config may exist; it is not observed.
- **Ours, later** (``not observable on CPU: <why>``): an error raised inside the observer or the
  emulation, by a stand-in of a GPU-only package, by an un-emulated Triton launch or CUDA-only call,
  or by an SGLang CPU fallback refusing what the GPU kernel does (``NotImplementedError``).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

NOT_OBSERVABLE = "not observable on CPU: "

# The process's state: SGLang's version once the process is prepared (``harness._prepare_process``),
# and whether errors print their tracebacks (``--verbose``).
_READY: dict[str, Any] = {}


class NotObservable(Exception):
    """Raised by the observer for what it cannot observe here; its message says why."""


def _emulation_gap(exc: BaseException, frames: list[traceback.FrameSummary]) -> str | None:
    """Why ``exc`` says nothing about SGLang on a GPU, or None when it may well: raised by the
    emulation itself, by a stand-in of a GPU-only package reaching arithmetic or a Triton kernel
    launch, or by an SGLang CPU fallback refusing what its GPU kernel does."""
    # hooks/sglang/: the observer and the CPU emulation (cpu_*.py) beside it
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    msg = str(exc)
    if frames and os.path.abspath(frames[-1].filename).startswith(here):
        return "eagle3-top's CPU emulation or observer cannot handle this"
    if "_StandInMeta" in msg or "StandIn" in msg:
        return "a GPU-only package (stand-in) was called for a value"
    if isinstance(exc, TypeError) and "'function' object is not subscriptable" in msg:
        return "a Triton kernel launch without a CPU stand-in"
    if isinstance(exc, NotImplementedError):
        return "SGLang's CPU fallback does not implement what the GPU kernel does"
    if "Torch not compiled with CUDA enabled" in msg or "no NVIDIA driver" in msg:
        return "a CUDA-only call (no GPU here)"
    return None


def _no_model_class(arch: str, version: str) -> str | None:
    """None when the release's model registry resolves ``arch`` natively. Else the fact, plainly
    (``no model class: ...``: the release has no class for it; an EAGLE-3 server with this target
    cannot start, its Transformers fallback captures no aux hidden states). A class the release's
    source defines but that did not import here is our problem, not the release's: raised."""
    import re

    import sglang.srt.models as models_pkg
    from sglang.srt.models.registry import ModelRegistry

    if arch in ModelRegistry.get_supported_archs():
        return None
    pattern = re.compile(rf"^class {re.escape(arch)}\b", re.M)
    for folder in models_pkg.__path__:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                if not pattern.search(f.read()):
                    continue
            module = f"sglang.srt.models.{name[:-3]}"
            try:
                importlib.import_module(module)
            except Exception as exc:
                raise NotObservable(
                    f"{module} defines {arch} but does not import here "
                    f"({type(exc).__name__}: {str(exc).strip()[:200]})"
                ) from exc
            return (
                f"no model class: SGLang {version} defines {arch} in {module} but does not register "
                "it in its model registry, so an EAGLE-3 server cannot start with this target"
            )
    return (
        f"no model class: SGLang {version} has no model class for {arch} (its model registry does "
        "not know the architecture), so an EAGLE-3 server cannot start with this target"
    )


def _error(exc: BaseException, harness_step: str | None = None) -> tuple[str, str | None]:
    """``"Type: first line"`` (prefixed ``not observable on CPU: <why>`` for an emulation gap, or
    for any error raised while ``harness_step``, a step of ours before SGLang's model code, ran)
    and the innermost frame in SGLang's code (``sglang/srt/...:line``)."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {msg}"[:400]
    if _READY.get("traceback"):
        traceback.print_exception(exc, file=sys.stderr)
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, NotObservable):
        text, gap = f"{NOT_OBSERVABLE}{msg}"[:400], None
    elif harness_step is not None:
        gap = f"eagle3-top's harness failed at {harness_step}, before SGLang's model code ran"
    else:
        gap = _emulation_gap(exc, frames)
    if gap is not None:
        text = f"{NOT_OBSERVABLE}{gap} ({text})"
    import sglang

    root = os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__))) + os.sep
    for frame in reversed(frames):
        if os.path.abspath(frame.filename).startswith(root + "sglang" + os.sep):
            return text, f"{os.path.relpath(frame.filename, root)}:{frame.lineno}"
    return text, None
