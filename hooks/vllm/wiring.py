"""The startup wiring report (the hello) read from a live vLLM model runner.

The engine-neutral assembly is ``tracer.serving.wiring``; what is vLLM's own: the speculative
config (``runner.speculative_config``), the ids the runner read (its own
``_get_eagle3_aux_layers_from_config``), the capture list the target holds
(``aux_hidden_state_layers``, read by ``live_capture``); the draft's ``draft_id_to_target_id`` (d2t
offsets, where SGLang holds target ids) is read by ``vocab_of``.
"""

from __future__ import annotations

from typing import Any

from eagle3_top.tracer.engines.vllm import ENGINE
from eagle3_top.tracer.engines.vllm.flags import algorithm_of
from eagle3_top.tracer.schema import Hello, SpecConfig
from eagle3_top.tracer.serving.wiring import (
    SpecReport,
    assemble_hello,
    draft_facts,
    target_facts,
)

_UNSET = object()


def vllm_version() -> str | None:
    try:
        import vllm

        return getattr(vllm, "__version__", None)
    except Exception:
        return None


def spec_of(spec_config: Any) -> SpecReport:
    """vLLM drafts a chain: K steps, top-k 1, K + 1 tokens verified per request. It keeps no record
    of what was asked apart from what it resolved, so requested and effective are the same."""
    method = getattr(spec_config, "method", None)
    k = getattr(spec_config, "num_speculative_tokens", None)
    k = int(k) if isinstance(k, int) else None
    eff = SpecConfig(algorithm_of(method), k, 1, None if k is None else k + 1)
    return SpecReport(
        requested=eff, effective=eff, requested_source=f"vLLM's speculative_config (method {method!r})"
    )


def ids_read(runner: Any) -> Any:
    """The ids the runner read (a list, None when it fell back to the default), or ``_UNSET``."""
    read = getattr(runner, "_get_eagle3_aux_layers_from_config", None)
    if read is None:
        return _UNSET
    got = read()
    return None if not got else [int(v) for v in got]


def wiring_from_runner(runner: Any, *, tp_rank: int = 0, tp_size: int = 1) -> Hello:
    """The hello from a live ``GPUModelRunner`` (vLLM's CPU runner is one) after ``load_model``."""
    spec_config = getattr(runner, "speculative_config", None)
    model_config = getattr(runner, "model_config", None)
    target = runner.get_model() if hasattr(runner, "get_model") else runner.model
    drafter = getattr(runner, "drafter", None)
    draft = getattr(drafter, "model", None)
    tfacts = target_facts(target)
    draft_path = getattr(getattr(spec_config, "draft_model_config", None), "model", None) or getattr(
        spec_config, "model", None
    )
    dfacts = draft_facts(draft, draft_path, tfacts.vocab_size)
    ids = ids_read(runner)
    return assemble_hello(
        engine=ENGINE,
        engine_version=vllm_version(),
        target=tfacts,
        draft=dfacts,
        target_path=getattr(model_config, "model", None),
        draft_path=draft_path,
        spec=spec_of(spec_config),
        use_aux_hidden_state=bool(getattr(runner, "use_aux_hidden_state_outputs", True)),
        ids_read=None if ids is _UNSET else ids,
        ids_read_known=ids is not _UNSET,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )
