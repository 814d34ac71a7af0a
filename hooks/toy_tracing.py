"""Attach the tracer to the built-in engine from outside, as it attaches to SGLang.

The engine knows nothing of the tracer: we wrap its ``verify`` (the per-step read point, like
``EAGLEWorkerV2.verify``) and put a forward pre-hook on the draft's ``model.fc`` (what the draft
really consumes). Run without speculation, it has no draft: its ``decode`` steps are published as
steps of width 1 (the input token as root, no drafts, the greedy token committed). The hello is read from the live objects: the capture list the target holds, the
ids the engine really read, the width ``fc`` expects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from eagle3_top.tracer import __version__
from eagle3_top.tracer.engines.toy import ENGINE
from eagle3_top.tracer.schema import Hello, Rewrite, SpecConfig
from eagle3_top.tracer.serving.tracer import Tracer
from eagle3_top.tracer.serving.wiring import SpecReport, wiring_report


def _spec(args: Any) -> SpecConfig:
    return SpecConfig(args.algorithm, args.num_steps, args.topk, args.num_draft_tokens)


def toy_hello(engine: Any) -> Hello:
    """The hello of the built-in engine, read from its live objects like SGLang's."""
    sa = engine.server_args
    rewrites = tuple(map(Rewrite.from_body, sa.rewrites))
    hello = wiring_report(
        engine=ENGINE,
        engine_version=__version__,
        target_model=engine.target,
        draft_model=engine.draft,
        target_path=sa.model_path,
        draft_path=sa.speculative_draft_model_path,
        target_arch="LlamaForCausalLM",
        spec=SpecReport(_spec(sa.requested), _spec(sa.effective), rewrites),
        use_aux_hidden_state=engine.use_aux_hidden_state,
        ids_read=engine.spec_aux_ids,
    )
    # No draft: nothing feeds one, and an aux report would read as a draft left on its defaults.
    return hello if engine.speculates else dataclasses.replace(hello, aux=None)


def attach_toy(engine: Any, tracer: Tracer) -> Callable[[], None]:
    """Wrap ``engine.verify``, ``engine.decode`` and ``engine.prefill`` and hook ``draft.model.fc``
    (when there is a draft); returns a function that detaches them all.

    Probe capture: while the wrapped ``prefill`` runs, the ``fc`` pre-hook sees the prefill
    draft-extend input ``[bs, L, K*H]`` (the toy prefills whole prompts, no prefix cache) and
    publishes the rows of requests whose rid carries the probe marker, one event per request."""
    tracer.set_slot_width(engine.target.config.hidden_size)
    tracer.publisher.set_hello(toy_hello(engine))
    original = engine.verify

    @tracer.guarded
    def after_verify(batch: Any, result: Any, dt: float) -> None:
        si = batch.spec_info
        retrieve = (si.retrieve_next_token, si.retrieve_next_sibling) if si.topk > 1 else None
        step = tracer.make_step(
            [r.rid for r in batch.reqs],
            si.draft_token,
            result.accept_lens,
            result.next_token_ids,
            topk=si.topk,
            retrieve=retrieve,
            dt=dt,
        )
        tracer.publish_step(step)

    def verify(batch: Any) -> Any:
        t0 = time.perf_counter()
        result = original(batch)
        after_verify(batch, result, time.perf_counter() - t0)
        return result

    original_decode = engine.decode

    @tracer.guarded
    def after_decode(batch: Any, result: Any, dt: float) -> None:
        # the input token is the root, as in a verify step: width 1, accept length 1
        step = tracer.make_step(
            [r.rid for r in batch.reqs], batch.input_ids, result.accept_lens, result.next_token_ids, dt=dt
        )
        tracer.publish_step(step)

    def decode(batch: Any) -> Any:
        t0 = time.perf_counter()
        result = original_decode(batch)
        after_decode(batch, result, time.perf_counter() - t0)
        return result

    original_prefill = engine.prefill
    prefilling: list[tuple[Any, Any]] = []  # (batch, prompts) while a prefill with probes runs

    def prefill(batch: Any, prompts: Any) -> Any:
        has_probe = any(tracer.is_probe(r.rid) for r in batch.reqs)
        if not has_probe or not tracer.recording:
            return original_prefill(batch, prompts)
        prefilling.append((batch, prompts))
        try:
            return original_prefill(batch, prompts)
        finally:
            prefilling.clear()

    @tracer.guarded
    def record_prefill_probes(rows: Any) -> None:
        batch, prompts = prefilling.pop()
        if rows.dim() != 3 or rows.shape[0] != len(batch.reqs):
            return  # a layout we do not know: skip, do not guess
        for i, req in enumerate(batch.reqs):
            if tracer.is_probe(req.rid):
                tracer.record_probe(req.rid, rows[i], prompts[i], offset=0)

    @tracer.guarded
    def fc_pre_hook(module: Any, args: tuple[Any, ...]) -> None:
        if prefilling:
            record_prefill_probes(args[0])
        if tracer.want_aux():
            tracer.record_aux(args[0])

    engine.verify = verify
    engine.decode = decode
    engine.prefill = prefill
    handle = None if engine.draft is None else engine.draft.model.fc.register_forward_pre_hook(fc_pre_hook)

    def detach() -> None:
        if handle is not None:
            handle.remove()
        engine.verify = original
        engine.decode = original_decode
        engine.prefill = original_prefill

    return detach
