"""vLLM's speculative config (``--speculative-config '{"method": ..., "model": ...,
"num_speculative_tokens": K}'``) in SGLang's vocabulary, and what vLLM silently decides about it
(``vllm/config/speculative.py``, 0.32).

vLLM drafts a chain: ``K`` steps, top-k 1, ``K + 1`` tokens verified per request (the root and K
drafts). A missing ``method`` is guessed from the draft's path: ``eagle3`` in it gives EAGLE-3,
``eagle-`` gives EAGLE-1, which feeds an EAGLE-3 draft the final hidden state instead of the aux
layers. A method outside the EAGLE family is reported as itself, and judged as no EAGLE-3.
"""

from __future__ import annotations

import dataclasses

from eagle3_top.tracer.engines.base import SpecArgs

METHODS = {"eagle3": "EAGLE3", "eagle": "EAGLE"}


def algorithm_of(method: str | None) -> str:
    """A vLLM method name in the hello's vocabulary: EAGLE3, EAGLE, or the method upper-cased."""
    if not method:
        return "UNKNOWN"
    return METHODS.get(method, str(method).upper()[:40])


def resolve_spec_args(requested: SpecArgs) -> tuple[SpecArgs, list[dict]]:
    """vLLM's effective chain for the requested flags: ``topk`` is always 1 and the verify width
    ``num_steps + 1``; a requested top-k or width that differs is rewritten, silently."""
    if requested.algorithm == "NONE":
        return SpecArgs("NONE", None, None, None), []
    eff = dataclasses.replace(requested)
    if eff.num_steps is None or eff.num_steps < 1:
        raise ValueError("num_speculative_tokens must be given and at least 1 (vLLM refuses to start)")
    rewrites: list[dict] = []
    if eff.topk not in (None, 1):
        rewrites.append(
            {"param": "topk", "from": eff.topk, "to": 1, "reason": "vLLM drafts a chain (top-k 1)"}
        )
    if eff.num_draft_tokens not in (None, eff.num_steps + 1):
        rewrites.append(
            {
                "param": "num_draft_tokens",
                "from": eff.num_draft_tokens,
                "to": eff.num_steps + 1,
                "reason": "vLLM verifies num_speculative_tokens + 1 tokens per request",
            }
        )
    eff.topk, eff.num_draft_tokens = 1, eff.num_steps + 1
    return eff, rewrites
