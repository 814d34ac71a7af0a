"""The verify steps of a vLLM worker, from what its model runner already holds on the host.

After ``GPUModelRunner.sample_tokens`` returns a ``ModelRunnerOutput`` (vLLM 0.32 without async
scheduling, which vLLM turns off on CPU), the step is in plain lists: the drafts it verified
(``scheduler_output.scheduled_spec_decode_tokens``, per request id) and the tokens each request
committed (``output.sampled_token_ids``, in ``output.req_ids`` order: the accepted drafts and the
bonus). vLLM's own counters (``Scheduler.update_from_output``) count a request-step exactly when
both are non-empty, with ``len(committed) - 1`` accepted drafts; the same rule makes our rows, so
the stream's totals equal vLLM's ``spec_decode`` metrics. Nothing here touches a device.

With async scheduling (vLLM's default on GPU) the output is an ``AsyncModelRunnerOutput`` whose
tokens are still on their way to the host: the same rows are made once vLLM's own ``get_output``
has them (``plugin``); the scheduler then holds placeholder drafts (-1), which the step carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eagle3_top.tracer.schema import STEP
from eagle3_top.tracer.serving.pending import ChainStep
from eagle3_top.tracer.serving.tracer import Tracer

MAX_TRACKED = 1 << 16  # roots kept for this many live requests at most (finished ones are dropped)


class Roots:
    """The last committed token of each live request: the root of its next verify step."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}

    def forget(self, finished: Any) -> None:
        if finished:
            pop = self.last.pop
            for rid in finished:
                pop(rid, None)
        if len(self.last) > MAX_TRACKED:  # requests that never said they finished
            self.last.clear()


def verify_rows(
    req_ids: Sequence[str], sampled: Sequence[Sequence[int]], spec: Mapping[str, Sequence[int]], roots: Roots
) -> list[tuple[str, int, Sequence[int], list[int]]]:
    """``(rid, root, drafts, committed)`` for each request-step vLLM counts, and the roots advanced.
    The committed lists are copied: vLLM trims them in place when a request stops."""
    last = roots.last
    rows = []
    for rid, got in zip(req_ids, sampled, strict=False):
        if not len(got):
            continue
        drafts = spec.get(rid)
        committed = list(got)
        if drafts:
            rows.append((rid, last.get(rid, -1), drafts, committed))
        last[rid] = committed[-1]
    return rows


def record_step(tracer: Tracer, roots: Roots, scheduler_output: Any, output: Any, dt: float) -> bool:
    """Publish one verify step; False when the step had no request-step to count."""
    sampled = getattr(output, "sampled_token_ids", None)
    req_ids = getattr(output, "req_ids", None)
    if sampled is None or req_ids is None:
        return False
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    rows = verify_rows(req_ids, sampled, spec, roots)
    roots.forget(getattr(scheduler_output, "finished_req_ids", None))
    if not rows:
        return False
    step = tracer.steps
    tracer.steps = step + 1
    tracer.publisher.publish(STEP, ChainStep(step, rows, dt))
    return True
