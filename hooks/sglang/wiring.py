"""The startup wiring report (the hello), read from SGLang's live objects.

The engine-neutral part (the draft config as written, the live capture list and its canonical
slots by SGLang's rules, the fc width, the d2t summary) is ``tracer.serving.wiring.wiring_report``,
which the built-in engine's adapter uses too. What is SGLang's own: the requested vs effective flags (``spec_flags``), which
ids SGLang really read (``model_runner.spec_aux_config``), the width SGLang sizes the draft's input
with (``eagle_utils.get_draft_input_from_target_hidden_dim``) and the release.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eagle3_top.tracer.engines.sglang import ENGINE
from eagle3_top.tracer.schema import Hello
from eagle3_top.tracer.serving.wiring import wiring_report

from .spec_flags import spec_report

_UNSET = object()


def ids_read_from_runner(target_runner: Any) -> tuple[Any, bool | None]:
    """``(eagle_aux_hidden_state_layer_ids, eagle_use_aux_hidden_state)`` as SGLang read them."""
    holders = [getattr(target_runner, "spec_aux_config", None), target_runner]
    for h in holders:
        if h is not None and hasattr(h, "eagle_aux_hidden_state_layer_ids"):
            ids = h.eagle_aux_hidden_state_layer_ids
            use = getattr(h, "eagle_use_aux_hidden_state", None)
            return (None if ids is None else [int(v) for v in ids]), use
    return _UNSET, None


def _sglang_version() -> str | None:
    try:
        import sglang

        return getattr(sglang, "__version__", None)
    except Exception:
        return None


def wiring_from_objects(
    server_args: Any,
    target_model: Any,
    draft_model: Any,
    draft_model_path: str | None = None,
    *,
    target_runner: Any = None,
    draft_runner: Any = None,
    ids_read: Any = _UNSET,
    use_aux_hidden_state: bool | None = None,
    live_spec: dict[str, Any] | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    sglang_version: str | None = None,
    argv: Sequence[str] | None = None,
) -> Hello:
    """The hello, from plain objects (SGLang's real ones, live or built on CPU in tests).

    ``ids_read``: the ids SGLang read (None = fell back to its default); taken from
    ``target_runner.spec_aux_config`` when not given.
    """
    if draft_model_path is None:
        draft_model_path = getattr(server_args, "speculative_draft_model_path", None)
    if ids_read is _UNSET and target_runner is not None:
        ids_read, use_from_runner = ids_read_from_runner(target_runner)
        if use_aux_hidden_state is None:
            use_aux_hidden_state = use_from_runner
    ids_known = ids_read is not _UNSET
    tcfg = getattr(target_model, "config", None)
    target_arch = (getattr(tcfg, "architectures", None) or [type(target_model).__name__])[0]
    sglang_width = None
    if draft_runner is not None:
        try:
            from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim

            sglang_width = int(get_draft_input_from_target_hidden_dim(draft_runner))
        except Exception:
            sglang_width = None
    return wiring_report(
        engine=ENGINE,
        engine_version=sglang_version if sglang_version is not None else _sglang_version(),
        target_model=target_model,
        draft_model=draft_model,
        target_path=getattr(server_args, "model_path", None),
        draft_path=draft_model_path,
        target_arch=target_arch,
        spec=spec_report(server_args, live=live_spec, target_arch=target_arch, argv=argv),
        use_aux_hidden_state=use_aux_hidden_state,
        ids_read=ids_read if ids_known else None,
        ids_read_known=ids_known,
        tp_rank=tp_rank,
        tp_size=tp_size,
        input_width=sglang_width,
    )


# -- from the live worker -----------------------------------------------------------------------------


def wiring_from_worker(worker: Any, *, tp_rank: int = 0, tp_size: int = 1) -> Hello:
    """The hello from a live ``EAGLEWorkerV2`` (``self`` inside ``verify``)."""
    target_runner = worker.target_worker.model_runner
    draft_worker = worker.draft_worker
    draft_runner = getattr(draft_worker, "draft_runner", None) or getattr(draft_worker, "model_runner", None)
    server_args = getattr(worker, "server_args", None) or getattr(target_runner, "server_args", None)
    live_spec = {
        "algorithm": getattr(worker, "speculative_algorithm", None),
        "num_steps": getattr(worker, "speculative_num_steps", None),
        "topk": getattr(worker, "topk", None),
        "num_draft_tokens": getattr(worker, "speculative_num_draft_tokens", None),
    }
    return wiring_from_objects(
        server_args,
        target_runner.model,
        getattr(draft_runner, "model", None),
        getattr(server_args, "speculative_draft_model_path", None),
        target_runner=target_runner,
        draft_runner=draft_runner,
        live_spec=live_spec,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )
