"""The aux states vLLM's EAGLE-3 drafter consumes, at ``combine_hidden_states(hidden_states)``.

``EagleProposer.propose`` (``v1/spec_decode/llm_base_proposer.py``, 0.32) hands the drafter the
target's captured layers concatenated, ``[tokens, slots * hidden]``, one row per token the target
computed this step, in the input batch's request order, each request's ``num_scheduled_tokens`` in
a row (``gpu_model_runner.propose_draft_token_ids``: ``torch.cat([h[:n] for h in aux])``): the
draft's ``fc`` input, the same tensor SGLang's adapter fingerprints. We wrap that method on the live
drafter (the instance, not the class) and

- fingerprint it every ``aux_interval_s`` (``Tracer.record_aux``: a reduction on the device, no sync);
- cut out the prompt rows of probe requests (rid carrying ``e3t-probe``) and publish them with the
  prompt ids they belong to (``Tracer.record_probe``), from the step's scheduler output.
"""

from __future__ import annotations

from typing import Any

from eagle3_top.tracer.serving.tracer import Tracer


def probe_segments(runner: Any, scheduler_output: Any, rows: int) -> list[tuple[str, int, int, list[int]]]:
    """``(rid, first row, prompt offset, prompt ids)`` of each probe request whose prompt tokens
    are in this step's rows; empty when the rows are not one per scheduled token."""
    from eagle3_top.tracer.schema import is_probe_rid

    counts = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
    if not any(is_probe_rid(r) for r in counts):
        return []
    order = list(getattr(runner.input_batch, "req_ids", []))
    if sum(counts.get(r, 0) for r in order) != rows:
        return []  # rows picked by index (disable_padded_drafter_batch): not ours to segment
    computed = {n.req_id: n.num_computed_tokens for n in getattr(scheduler_output, "scheduled_new_reqs", [])}
    cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
    if cached is not None:
        computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=False))
    out, start = [], 0
    for rid in order:
        n = counts.get(rid, 0)
        if is_probe_rid(rid) and rid in computed:
            prompt = getattr(runner.requests.get(rid), "prompt_token_ids", None) or []
            offset = int(computed[rid])
            take = min(n, len(prompt) - offset)  # prompt rows only: decode rows belong to no sample
            if take > 0:
                out.append((rid, start, offset, [int(t) for t in prompt[offset : offset + take]]))
        start += n
    return out


def install(tracer: Tracer, drafter: Any, runner: Any) -> None:
    """Wrap the live drafter's ``combine_hidden_states``."""
    original = drafter.combine_hidden_states

    def record(hidden: Any) -> None:
        if hidden.dim() != 2 or hidden.shape[0] == 0:
            return
        if tracer.want_aux():
            tracer.record_aux(hidden, where="fc_input")
        state = getattr(runner, "_eagle3_top", None)
        sched = getattr(state, "scheduler_output", None)
        if sched is not None:
            for rid, first, offset, ids in probe_segments(runner, sched, int(hidden.shape[0])):
                tracer.record_probe(rid, hidden[first : first + len(ids)], ids, offset)

    def combine_hidden_states(hidden_states: Any) -> Any:
        if tracer.recording:
            tracer.hook(record)(hidden_states)
        return original(hidden_states)

    drafter.combine_hidden_states = combine_hidden_states
