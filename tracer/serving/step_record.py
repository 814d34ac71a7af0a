"""A verify step as a fixed-layout record: what the serving thread writes into the ring and the
sidecar turns into the wire's step body.

The serving thread copies the columns it already holds as bytes (no conversion, no per-row
Python): the draft, the accept lengths and committed tokens as the engine's host copies lie, the
tree links for top-k > 1, one flag per row kept, and the rids joined by NUL. Everything the wire's
body needs that costs Python per row (accept lengths to accepted drafts, the committed tokens'
cut, tree parents) is done by the sidecar with ``pending.step_fields``, the very function the
in-process sender uses, so the stream on the wire is the same.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import msgpack
import numpy as np
from eagle3_top.tracer.serving.pending import DeferredStep, step_fields

# step, ts, dt, batch, n, discarded, rid bytes, topk, dtype chars (draft, accept, tokens, links;
# 0 = none), has keep flags, rid encoding (0: NUL-joined UTF-8, 1: msgpack list)
HEAD = struct.Struct("<qddIIIIHBBBBBB")
_JOINED, _PACKED = 0, 1


def _c(a: Any) -> memoryview:
    return np.ascontiguousarray(a).data.cast("B")


def step_parts(step: DeferredStep, ts: float | None = None) -> list[Any]:
    """The record's payload, as parts to lay end to end (views over the host arrays: write them
    before ``step.release()``). Call once ``step.ready()``."""
    draft, acc, nxt, retrieve, keep = step.host_columns()
    rids = step.rids
    text = "\0".join(rids)
    if text.count("\0") == len(rids) - 1 or not rids:
        blob, enc = text.encode("utf-8", "surrogatepass"), _JOINED
    else:  # a rid holding NUL itself: rare enough to pay for msgpack
        blob, enc = msgpack.packb(rids, use_bin_type=True), _PACKED
    bs = len(acc)
    n = draft.size // max(bs, 1)
    ret_char = 0 if retrieve is None else ord(retrieve[0].dtype.char)
    head = HEAD.pack(
        step.step,
        time.time() if ts is None else ts,
        step.dt,
        bs,
        n,
        step.discarded,
        len(blob),
        step.topk,
        ord(draft.dtype.char),
        ord(acc.dtype.char),
        ord(nxt.dtype.char),
        ret_char,
        keep is not None,
        enc,
    )
    parts: list[Any] = [head, blob]
    if keep is not None:
        parts.append(keep)
    parts += [_c(draft), _c(acc), _c(nxt)]
    if retrieve is not None:
        parts += [_c(retrieve[0]), _c(retrieve[1])]
    return parts


class RecordError(ValueError):
    """A step record whose sizes do not add up (one line)."""


def step_from_record(payload: bytes) -> tuple[float, dict[str, Any]]:
    """(ts, the wire's step body) from a record ``step_parts`` wrote."""
    if len(payload) < HEAD.size:
        raise RecordError(f"step record of {len(payload)} bytes, shorter than its header")
    step, ts, dt, bs, n, discarded, rid_len, topk, dc, ac, nc, rc, has_keep, enc = HEAD.unpack_from(payload)
    at = HEAD.size
    blob = payload[at : at + rid_len]
    at += rid_len
    keep = None
    if has_keep:
        keep = payload[at : at + bs]
        at += bs

    def take(char: int, count: int) -> np.ndarray:
        nonlocal at
        dtype = np.dtype(chr(char))
        end = at + count * dtype.itemsize
        if end > len(payload):
            raise RecordError(f"step record {step}: column past its end ({end} > {len(payload)} bytes)")
        a = np.frombuffer(payload, dtype=dtype, count=count, offset=at)
        at = end
        return a

    draft, acc, nxt = take(dc, bs * n), take(ac, bs), take(nc, bs * n)
    retrieve = (take(rc, bs * n), take(rc, bs * n)) if rc else None
    if at != len(payload):
        raise RecordError(f"step record {step}: {len(payload) - at} bytes left over")
    rids = blob.decode("utf-8", "surrogatepass").split("\0") if enc == _JOINED else msgpack.unpackb(blob)
    body = step_fields(
        step=step,
        rids=rids,
        draft=draft.reshape(bs, n),
        accept_lens=acc,
        next_tokens=nxt,
        topk=topk,
        retrieve=retrieve,
        keep=keep,
        dt=dt,
        discarded=discarded,
    )
    return ts, body
