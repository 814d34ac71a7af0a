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
from collections.abc import Callable
from ctypes import addressof, c_char, memmove
from typing import Any

import msgpack
import numpy as np
from eagle3_top.tracer.serving.pending import DeferredStep, step_fields

# step, ts, dt, batch, n, discarded, rid bytes, topk, dtype chars (draft, accept, tokens, links;
# 0 = none), has keep flags, rid encoding (0: NUL-joined UTF-8, 1: msgpack list)
HEAD = struct.Struct("<qddIIIIHBBBBBB")
_JOINED, _PACKED = 0, 1
# the header and the rids (and keep flags) after it, by their byte count: one ``pack_into`` writes
# both, a ctypes call fewer per record (rids of one server have a handful of lengths)
_HEAD_AND: dict[int, struct.Struct] = {}


def _head_and(n: int) -> struct.Struct:
    s = _HEAD_AND.get(n)
    if s is None:
        if len(_HEAD_AND) >= 256:
            _HEAD_AND.clear()
        s = _HEAD_AND[n] = struct.Struct(f"{HEAD.format}{n}s")
    return s


# fills a record's payload: (the ring's buffer, its base address, the payload's offset in it)
Fill = Callable[[Any, int, int], None]


def step_record(step: DeferredStep, ts: float | None = None) -> tuple[int, Fill]:
    """The record's payload size, and what writes it: the header packed in place, then each part
    ``memmove``d from where it lies (the host copies' memory, read before ``step.release()``).
    Call once ``step.ready()``. Per part no numpy object, no memoryview, no slice: this runs on the
    serving thread, whose caches are cold between steps, where each Python object costs."""
    draft, acc, nxt, retrieve, keep = step.host_spans()
    text, count = step.rid_text()
    if not count or text.count("\0") == count - 1:
        blob, enc = text.encode("utf-8", "surrogatepass"), _JOINED
    else:  # a rid holding NUL itself: rare enough to pay for msgpack
        blob, enc = msgpack.packb(step.rids, use_bin_type=True), _PACKED
    if keep is not None:
        blob += keep  # the flags follow the rids: one copy for both
    bs = acc[2]
    cols = (draft, acc, nxt) if retrieve is None else (draft, acc, nxt, *retrieve)
    size = HEAD.size + len(blob)
    for c in cols:
        size += c[1]
    head = (
        step.step,
        time.time() if ts is None else ts,
        step.dt,
        bs,
        draft[2] // max(bs, 1),
        step.discarded,
        len(blob) - (0 if keep is None else len(keep)),
        step.topk,
        draft[3],
        acc[3],
        nxt[3],
        0 if retrieve is None else retrieve[0][3],
        keep is not None,
        enc,
    )

    packer = _head_and(len(blob))

    def fill(buf: Any, base: int, at: int) -> None:
        packer.pack_into(buf, at, *head, blob)
        at += packer.size
        for addr, nbytes, _, _, _ in cols:
            memmove(base + at, addr, nbytes)
            at += nbytes

    return size, fill


def step_parts(step: DeferredStep, ts: float | None = None) -> list[Any]:
    """The record's payload in memory, as ``Ring.try_write``'s parts (the aux thread's path, and
    tests): the very bytes ``step_record``'s fill writes into the ring."""
    size, fill = step_record(step, ts)
    out = bytearray(size)
    anchor = c_char.from_buffer(out)
    try:
        fill(out, addressof(anchor), 0)
    finally:
        del anchor  # the export would keep ``out`` from being resized or freed early
    return [bytes(out)]


class RecordError(ValueError):
    """A step record whose sizes do not add up (one line)."""


def step_from_record(payload: bytes) -> tuple[float, dict[str, Any]]:
    """(ts, the wire's step body) from a record ``step_record`` wrote."""
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
