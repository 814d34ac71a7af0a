"""Attach the tracer to the built-in engine from outside, as it attaches to SGLang.

The engine knows nothing of the tracer: we wrap its ``verify`` (the per-step read point, like
``EAGLEWorkerV2.verify``) and put a forward pre-hook on the draft's ``model.fc`` (what the draft
really consumes). The hello is read from the live objects: the capture list the target holds, the
ids the engine really read, the width ``fc`` expects.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from eagle3_top.tracer import __version__
from eagle3_top.tracer.layers import LLAMA_CONVENTION, canonical_slots, captured_input_layers
from eagle3_top.tracer.manifest import d2t_summary, draft_layer_ids

from .attach import Tracer


def _draft_config_as_written(draft_path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(draft_path, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def toy_hello(engine: Any) -> dict[str, Any]:
    sa = engine.server_args
    dcfg = _draft_config_as_written(sa.speculative_draft_model_path)
    declared, where = draft_layer_ids(dcfg)
    hot = engine.draft.hot_token_id.detach().cpu().numpy()
    tcfg = engine.target.config
    n_layers, hidden = tcfg.num_hidden_layers, tcfg.hidden_size
    if engine.use_aux_hidden_state:
        native = list(engine.target.model.layers_to_capture)
        slots = len(captured_input_layers(native, n_layers))
        canonical = canonical_slots(native, n_layers)
    else:
        native, canonical, slots = [], [], 0
    return {
        "engine": {"name": "toy", "version": __version__},
        "model": {
            "target_path": sa.model_path,
            "draft_path": sa.speculative_draft_model_path,
            "arch": "LlamaForCausalLM",
            "num_layers": n_layers,
            "hidden_size": hidden,
            "vocab_size": tcfg.vocab_size,
            "dtype": "float32",
            "draft_arch": "LlamaForCausalLMEagle3",
            "draft_vocab_size": engine.draft.config.draft_vocab_size,
        },
        "tp": {"rank": 0, "size": 1},
        "spec": {
            "requested": sa.requested.to_dict(),
            "effective": sa.effective.to_dict(),
            "rewrites": list(sa.rewrites),
        },
        "vocab": d2t_summary(hot - np.arange(hot.shape[0]), tcfg.vocab_size),
        "aux": {
            "eagle_config": dcfg.get("eagle_config"),
            "declared_ids": declared,
            "ids_location": where,
            "ids_read": engine.spec_aux_ids,
            "use_aux_hidden_state": engine.use_aux_hidden_state,
            "capture_native": native,
            "capture_canonical": canonical,
            "convention": LLAMA_CONVENTION,
            "slots": slots,
            "width": slots * hidden if slots else hidden,
            "expected_width": engine.draft.model.fc.in_features,
        },
    }


def attach_toy(engine: Any, tracer: Tracer) -> Callable[[], None]:
    """Wrap ``engine.verify`` and ``engine.prefill`` and hook ``draft.model.fc``; returns a function
    that detaches all three.

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
    engine.prefill = prefill
    handle = engine.draft.model.fc.register_forward_pre_hook(fc_pre_hook)

    def detach() -> None:
        handle.remove()
        engine.verify = original
        engine.prefill = original_prefill

    return detach
