"""Observe, on a CPU, what the INSTALLED SGLang release really captures for an EAGLE-3 draft.

For a target architecture and a draft config, each case writes the draft's layer ids one way
(``CASES``), and this runs that release's real code on a tiny copy of the target (8 layers, hidden
64, vocab 256; the architecture and its structural switches kept): ServerArgs from a launcher
command line (``prepare_server_args``), the ids SGLang reads (``resolve_spec_aux_hidden_state_config``),
the target class as the model registry resolves ``architectures[0]`` (``_initialize_model``), random
weights (seeded normal, never zeros), the capture set as the model runner sets it
(``configure_aux_hidden_state_capture`` -> ``set_eagle3_layers_to_capture``), and one bfloat16
prefill (EXTEND) of a 7-token prompt through the decoder stack's own ``forward`` (the loop that
captures), with the norm and activation ops on their CUDA path (``cpu_emulation`` says exactly what
is real SGLang code and what is emulated; ``--native-path`` is the control without it).

Each returned aux slot is compared with what the embedding and each decoder block produced in the
same forward (``compare``: which layer it holds, and whether its memory was written in place after
its capture). A crash at setup or in the forward is a result, recorded; one that is ours, not
SGLang's, is marked ``not observable on CPU:`` (``errors`` says whose error is whose).

The package: ``configs`` (the full-size target and draft configs of each architecture), ``shrink``
(their tiny copies), ``harness`` (SGLang set up on the CPU as its server would), ``compare`` (the
references, the write log and the slots), ``errors`` (SGLang's errors vs the harness's); this
module runs the cases (``observe``, one row each) and ``__main__`` is the command line:

    python -m eagle3_top.hooks.sglang.observe --target-config T.json --draft-config D.json [--case NAME ...]
    python -m eagle3_top.hooks.sglang.observe --matrix [--config-dir tests/data/published]

JSON on stdout (a list of case results), progress on stderr. Per case: ``ids`` as written,
``ids_read`` by SGLang (null: none read, the target's default used), ``native`` (the capture list
as stored) and ``flagged`` (``_is_layer_to_capture`` flags, where the model keeps them), errors with
``error_at`` (the innermost SGLang frame), and per returned slot ``holds`` (canonical id, or null),
``intended`` (the id written, or SpecForge's default ``[1, n/2-1, n-4]`` when none is),
``max_abs_diff_to_intended`` and ``shares_storage_with_later_modified``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from eagle3_top.hooks.sglang.observe.compare import (
    HOLDS_TOLERANCE,
    _compare,
    _install_hooks,
    _Observation,
    _slots_of,
    _write_log_mode,
)
from eagle3_top.hooks.sglang.observe.configs import (
    ARCHITECTURES,
    DRAFT_FAMILIES,
    HAND_WRITTEN,
    PUBLISHED_DIR,
    PUBLISHED_OVERRIDES,
    REMOTE_CODE_CONFIGS,
    base_config,
    default_draft_config,
    matrix_config,
)
from eagle3_top.hooks.sglang.observe.errors import NOT_OBSERVABLE, NotObservable, _error, _no_model_class
from eagle3_top.hooks.sglang.observe.harness import (
    EXTRA_ARGV,
    PROMPT_LEN,
    SEED,
    _attention,
    _build_target,
    _flagged,
    _forward_batch,
    _init_dp_attention,
    _inner_model,
    _native,
    _prepare_process,
    _read_ids,
    _server_args,
    _set_capture,
    _write_models,
)
from eagle3_top.hooks.sglang.observe.shrink import (
    DRAFT_VOCAB,
    DTYPE,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    N_LAYERS,
    VOCAB,
    draft_config_for,
    real_depth,
    shrink_config,
)
from eagle3_top.tracer.engines.sglang import defects

__all__ = [
    "ARCHITECTURES",
    "CASES",
    "DEFAULT_TRAINED",
    "DRAFT_FAMILIES",
    "DRAFT_VOCAB",
    "DTYPE",
    "EXTRA_ARGV",
    "GIVEN",
    "HAND_WRITTEN",
    "HEADS",
    "HEAD_DIM",
    "HIDDEN",
    "HOLDS_TOLERANCE",
    "MAX_GIVEN_LAYERS",
    "NOT_OBSERVABLE",
    "N_LAYERS",
    "NotObservable",
    "PROMPT_LEN",
    "PUBLISHED_DIR",
    "PUBLISHED_OVERRIDES",
    "REMOTE_CODE_CONFIGS",
    "SEED",
    "VOCAB",
    "base_config",
    "default_draft_config",
    "draft_config_for",
    "given_case",
    "intended_ids",
    "matrix_config",
    "observe",
    "real_depth",
    "shrink_config",
    "written_ids",
]

# canonical ids as a draft config writes them (8 layers)
# The cases, as ``tracer/engines/sglang/defects.py`` defines them (one list for the observer and the
# table that reads its results): ids nested in eagle_config, or at the top level where SGLang does not look.
CASES: dict[str, dict[str, Any]] = {
    name: ({"top": ids} if name in defects.TOP_LEVEL else {"nested": ids})
    for name, ids in defects.CASES.items()
}

# What a draft trained without ids was trained on (SpecForge's default): canonical [1, n/2-1, n-4].
DEFAULT_TRAINED = [1, N_LAYERS // 2 - 1, N_LAYERS - 4]

MAX_GIVEN_LAYERS = 256  # a given target deeper than this is observed this deep (none published comes near)
GIVEN = "given"  # not a matrix case: the draft config's own ids, on the target at its own depth


def written_ids(case: dict[str, Any]) -> list[int] | None:
    ids = case.get("nested", case.get("top"))
    return None if ids is None else list(ids)


def intended_ids(case: dict[str, Any], n_layers: int = N_LAYERS) -> list[int]:
    """What the draft was trained on: the ids written (wherever), or SpecForge's default."""
    ids = written_ids(case)
    return [1, n_layers // 2 - 1, n_layers - 4] if ids is None else ids


def given_case(draft_config: dict[str, Any]) -> dict[str, Any]:
    """The case a draft config makes as written: its nested ids, else its top-level ones."""
    ec = draft_config.get("eagle_config")
    nested = ec.get("eagle_aux_hidden_state_layer_ids") if isinstance(ec, dict) else None
    top = draft_config.get("eagle_aux_hidden_state_layer_ids")
    case: dict[str, Any] = {"given": True}
    if isinstance(nested, list):
        case["nested"] = nested
    elif isinstance(top, list):
        case["top"] = top
    else:
        case["nested"] = None
    return case


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _blank_row(
    version: str, arch: str, case_name: str, case: dict[str, Any], n_layers: int
) -> dict[str, Any]:
    return {
        "sglang_version": version,
        "architecture": arch,
        "model_class": None,
        "num_layers": n_layers,
        "hidden_size": HIDDEN,
        "case": case_name,
        "ids": written_ids(case),
        "ids_where": "top_level" if "top" in case else "eagle_config",
        "ids_read": None,
        "use_aux": None,
        "native": None,
        "flagged": None,
        "setup_error": None,
        "forward_error": None,
        "error_at": None,
        "slots": None,
        "cuda_path_ops": None,
        "emulated_kernel_calls": None,
        "seconds": None,
    }


def _observe_case(
    version: str,
    arch: str,
    target_small: dict[str, Any],
    draft_config: dict[str, Any],
    case_name: str,
    root: str,
    cuda_path: bool,
) -> dict[str, Any]:
    import torch
    from eagle3_top.hooks.sglang import cpu_attention, cpu_emulation, cpu_kernels, cpu_standins

    case = given_case(draft_config) if case_name == GIVEN else CASES[case_name]
    t0 = time.monotonic()
    row = _blank_row(version, arch, case_name, case, real_depth(target_small) or N_LAYERS)
    step = "the model registry"
    try:
        missing = _no_model_class(arch, version)
        if missing is not None:
            row["setup_error"] = missing
            row["seconds"] = round(time.monotonic() - t0, 3)
            return row
        step = "the shrunk draft config"
        draft = draft_config_for(draft_config, target_small, case)
        tdir, ddir = _write_models(root, f"{arch}-{case_name}", target_small, draft)
        from sglang.srt.configs.model_config import ModelConfig

        step = "ServerArgs from our launcher flags"
        sa = _server_args(tdir, ddir, arch)
        cpu_standins.publish_server_args(sa)
        step = "ModelConfig of the shrunk target"
        mc = ModelConfig.from_server_args(sa)
        step = "the attention data-parallel setup"
        _init_dp_attention(sa, mc)
        step = ""  # from here on SGLang's own code: its errors are results
        aux_cfg = _read_ids(sa, mc)
        ids_read = aux_cfg.eagle_aux_hidden_state_layer_ids
        row["ids_read"] = None if ids_read is None else [int(i) for i in ids_read]
        row["use_aux"] = bool(aux_cfg.eagle_use_aux_hidden_state)
        model = _build_target(mc)
        row["model_class"] = f"{type(model).__module__}.{type(model).__qualname__}"
        if cuda_path:
            row["cuda_path_ops"] = cpu_emulation.use_cuda_path(model)
        _set_capture(model, aux_cfg)
        inner = _inner_model(model)
        row["native"] = _native(inner)
        row["flagged"] = _flagged(inner)
    except Exception as exc:  # a crash at setup is a result (SGLang's, or ours: marked unobserved)
        row["setup_error"], row["error_at"] = _error(exc, harness_step=step or None)
        row["seconds"] = round(time.monotonic() - t0, 3)
        return row
    try:
        g = torch.Generator().manual_seed(SEED + 1)
        input_ids = torch.randint(1, VOCAB - 1, (PROMPT_LEN,), generator=g)
        fb = _forward_batch(input_ids)
        obs = _Observation()
        handles = _install_hooks(inner, obs)
        cpu_kernels.CALLS.clear()
        try:
            with (
                torch.no_grad(),
                _attention(cpu_attention.StandInAttentionBackend([PROMPT_LEN], getattr(torch, DTYPE)), fb),
            ):
                with _write_log_mode(obs):
                    result = inner(input_ids, fb.positions, fb)
        finally:
            for h in handles:
                h.remove()
            row["emulated_kernel_calls"] = dict(sorted(cpu_kernels.CALLS.items()))
        text = getattr(inner, "config", None) or target_small
        hidden = int(getattr(text, "hidden_size", HIDDEN))
        slots = _slots_of(result, hidden)
        if slots is None:
            raise TypeError(f"aux of type {type(result[1]).__name__}: not a list or packed tensor")
        row["slots"] = _compare(slots, obs, intended_ids(case, row["num_layers"]))
    except Exception as exc:  # a crash in the forward is a result
        row["forward_error"], row["error_at"] = _error(exc)
    row["seconds"] = round(time.monotonic() - t0, 3)
    return row


def _summary(row: dict[str, Any]) -> str:
    if row["setup_error"]:
        return f"setup error: {row['setup_error']}"
    if row["forward_error"]:
        return f"forward error: {row['forward_error']}"
    slots = row["slots"] or []
    return "slots " + (
        " ".join(
            f"{s['holds']}{'*' if s['shares_storage_with_later_modified'] else ''}"
            f"{'' if s['holds'] == s['intended'] else '!'}"
            for s in slots
        )
        or "none"
    )


def observe(
    target_config: dict[str, Any],
    draft_config: dict[str, Any],
    *,
    cases: Sequence[str] = tuple(CASES),
    quiet: bool = True,
    cuda_path: bool = True,
    source: str | None = None,
    progress: Callable[[str], None] | None = _say,
) -> list[dict[str, Any]]:
    """Run each case on the installed SGLang with a tiny copy of ``target_config``; one dict per case.
    ``cuda_path=False`` leaves the norms and activations on SGLang's native CPU path (a control:
    their out-of-place arithmetic hides the in-place aliasing of the CUDA kernels)."""
    unknown = [c for c in cases if c not in CASES and c != GIVEN]
    if unknown:
        raise ValueError(f"unknown case(s) {unknown}; known: {list(CASES)} and {GIVEN}")
    archs = target_config.get("architectures") or ["?"]
    arch = str(archs[0])
    version = _prepare_process(quiet)
    depth = real_depth(target_config) if GIVEN in cases else None  # a given pair: its ids at its own depth
    try:
        target_small, notes = shrink_config(
            target_config, min(depth, MAX_GIVEN_LAYERS) if depth else N_LAYERS
        )
        shrink_error = None
    except Exception as exc:  # ours: nothing of SGLang ran
        target_small, notes = target_config, []
        shrink_error, _ = _error(exc, harness_step="shrinking the target config")
    if depth is not None and depth > MAX_GIVEN_LAYERS:
        notes.append(f"observed at {MAX_GIVEN_LAYERS} of its {depth} layers")
    rows = []
    with tempfile.TemporaryDirectory(prefix="e3t-observe-") as root:
        for name in cases:
            if shrink_error is not None:
                case = given_case(draft_config) if name == GIVEN else CASES[name]
                row = _blank_row(version, arch, name, case, N_LAYERS)
                row.update(setup_error=shrink_error, seconds=0.0)
            else:
                row = _observe_case(version, arch, target_small, draft_config, name, root, cuda_path)
            row["config_source"] = source
            row["config_notes"] = notes
            rows.append(row)
            if progress is not None:
                progress(f"[{version}] {arch} {name}: {_summary(row)} ({row['seconds']:.1f} s)")
    return rows
