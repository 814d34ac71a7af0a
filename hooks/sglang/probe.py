"""Probe capture: the prefill draft-extend's aux rows of requests marked as probes.

``EagleDraftWorker._draft_extend_for_prefill(batch, target_hidden_states, next_token_ids, ...)``
(0.5.17 and 0.5.23) receives the target's packed aux states ``[sum(extend_lens), K*H]``, one row
per prompt token computed in this forward (the draft's ``fc`` input, ``models/llama_eagle3.py``): row p of a request is the aux at prompt
position ``prefix_len + p``. We segment them per request with the batch's extend / prefix lengths
(host-side lists) *before* calling the original, which rotates ``batch.input_ids`` in place, and
hand the slices of probe requests to ``Tracer.record_probe`` (non-blocking copies only; no sync).
With a radix-cache hit or chunked prefill the cached / earlier rows are not here: the event's
``offset`` says where the rows start.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from eagle3_top.tracer.serving.tracer import Tracer

from .verify import _capturing, report_engine_failure

PREFILL_EXTEND_TARGET = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_prefill"


def _lens(batch: Any, *names: str) -> list[int] | None:
    for name in names:
        v = getattr(batch, name, None)
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            return [int(x) for x in v]
        return None  # a device tensor: reading it would sync; skip
    return None


_HOST_SEQ = (list, tuple, array)


def _host_ids(req: Any, start: int, n: int) -> list[int] | None:
    """Token ids at positions ``[start, start + n)`` of a request's sequence, from the host-side
    ``origin_input_ids`` (then ``output_ids``, for a request resumed after a retraction), as every
    supported SGLang keeps them on ``Req``; None when they are not there."""
    seq = getattr(req, "origin_input_ids", None)
    if not isinstance(seq, _HOST_SEQ):
        return None
    if start + n > len(seq):
        out = getattr(req, "output_ids", None)
        if not isinstance(out, _HOST_SEQ) or start + n > len(seq) + len(out):
            return None
        seq = list(seq) + list(out)
    return [int(t) for t in seq[start : start + n]]


def record_prefill_probes(tracer: Tracer, batch: Any, hidden: Any) -> int:
    """Publish the rows of every probe request in this prefill batch; returns how many."""
    reqs = getattr(batch, "reqs", None)
    if not reqs or hidden is None or _capturing():
        return 0
    if not any(tracer.is_probe(getattr(r, "rid", None)) for r in reqs):
        return 0  # the common case: one generator pass over host strings
    fm = getattr(batch, "forward_mode", None)
    if fm is not None and getattr(fm, "is_idle", lambda: False)():
        return 0
    extend = _lens(batch, "extend_lens", "extend_seq_lens")
    prefix = _lens(batch, "prefix_lens", "extend_prefix_lens") or [0] * len(reqs)
    if extend is None or len(extend) != len(reqs) or len(prefix) != len(reqs):
        return 0
    if getattr(hidden, "dim", lambda: 0)() != 2 or hidden.shape[0] != sum(extend):
        return 0  # a layout we do not know (padded, DP attention): skip, do not guess
    input_ids = getattr(batch, "input_ids", None)
    n = 0
    pt = 0
    for req, ext, pre in zip(reqs, extend, prefix, strict=True):
        rid = getattr(req, "rid", None)
        if ext > 0 and tracer.is_probe(rid):
            ids: Any = _host_ids(req, pre, ext)  # host lists: no device read
            if ids is None:
                # copied before the original rotates it in place
                ids = input_ids[pt : pt + ext] if input_ids is not None else [-1] * ext
            tracer.record_probe(str(rid), hidden[pt : pt + ext], ids, offset=pre)
            n += 1
        pt += ext
    return n


def make_around_prefill_extend(get_tracer: Callable[[Any], Tracer | None]) -> Callable[..., Any]:
    """AROUND hook ``fn(original, self, batch, target_hidden_states, *args, **kwargs)``."""

    def around(original: Callable[..., Any], self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            tracer = get_tracer(self)
        except Exception:
            tracer = None
        if tracer is not None and tracer.recording:
            hidden = args[0] if args else kwargs.get("target_hidden_states")
            guarded = getattr(tracer, "_e3t_prefill_probes", None)
            if guarded is None:
                guarded = tracer.guarded(record_prefill_probes)
                tracer._e3t_prefill_probes = guarded
            guarded(tracer, batch, hidden)
        try:
            return original(self, batch, *args, **kwargs)
        except BaseException as exc:
            report_engine_failure(get_tracer, self, exc)
            raise

    return around
