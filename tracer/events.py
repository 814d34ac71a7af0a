"""Event schema v1: one msgpack map per ZeroMQ message (see docs/protocol.md).

Per-request data in ``step`` events is columnar: fixed-dtype little-endian arrays carried as
msgpack ``bin`` values, so that encoding a batch of 64 requests costs one ``tobytes`` per column
instead of 64 small maps, and a subscriber decodes a column with one ``np.frombuffer``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

SCHEMA_VERSION = 1

HELLO = "hello"
STEP = "step"
AUX = "aux"
PROBE = "probe"
HEALTH = "health"
KINDS = frozenset({HELLO, STEP, AUX, PROBE, HEALTH})

# Column dtypes of a step event; fixed by the protocol so that a subscriber needs no dtype field.
TOKEN_DTYPE = np.dtype("<i4")

ENVELOPE_KEYS = ("v", "kind", "src", "seq", "ts")


class DecodeError(ValueError):
    """A frame that is not a valid v1 event; the message says what is wrong in one line."""


@dataclass(frozen=True)
class SourceId:
    """Who published an event: one engine rank in one process on one host."""

    host: str
    pid: int
    rank: int = 0
    engine: str = "unknown"

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}:r{self.rank}"

    def to_wire(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "rank": self.rank, "engine": self.engine}

    @staticmethod
    def local(rank: int = 0, engine: str = "unknown") -> SourceId:
        return SourceId(socket.gethostname(), os.getpid(), rank, engine)


@dataclass
class Event:
    kind: str
    src: str
    seq: int
    ts: float
    body: dict[str, Any] = field(default_factory=dict)
    version: int = SCHEMA_VERSION


def encode(kind: str, src: str, seq: int, ts: float, body: Mapping[str, Any]) -> bytes:
    msg: dict[str, Any] = {"v": SCHEMA_VERSION, "kind": kind, "src": src, "seq": seq, "ts": ts}
    msg.update(body)
    return msgpack.packb(msg, use_bin_type=True)


def decode(frame: bytes) -> Event:
    """Decode one frame; raises DecodeError for anything that is not a v1 event."""
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False, max_bin_len=64 << 20)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise DecodeError(f"not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(msg, dict):
        raise DecodeError(f"not a map: top-level {type(msg).__name__}")
    v = msg.pop("v", None)
    if v != SCHEMA_VERSION:
        raise DecodeError(f"schema version {v!r}, expected {SCHEMA_VERSION}")
    kind, src, seq, ts = (
        msg.pop("kind", None),
        msg.pop("src", None),
        msg.pop("seq", None),
        msg.pop("ts", None),
    )
    if not isinstance(kind, str):
        raise DecodeError(f"missing or non-string 'kind': {kind!r}")
    if not isinstance(src, str):
        raise DecodeError(f"missing or non-string 'src' in {kind} event")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise DecodeError(f"missing or non-integer 'seq' in {kind} event")
    if not isinstance(ts, (int, float)):
        raise DecodeError(f"missing or non-numeric 'ts' in {kind} event")
    return Event(kind, src, seq, float(ts), msg)


def lookup(d: Mapping[str, Any] | None, *path: str) -> Any:
    """Nested field of an event body, or None where a key is missing or a value is not a map
    (hello fields may be absent or odd; readers must not crash on them)."""
    cur: Any = d
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def column(arr: Any) -> bytes:
    """A token column as wire bytes (int32 little-endian, row-major)."""
    return np.ascontiguousarray(arr, dtype=TOKEN_DTYPE).tobytes()


@dataclass(frozen=True)
class StepView:
    """Typed, validated view of a step event's columns."""

    step: int
    batch: int
    n: int  # verify width per request, root included (SGLang's num_draft_tokens)
    topk: int
    rids: list[str]
    draft: np.ndarray  # [batch, n] int32; column 0 is the root (last committed token)
    parents: np.ndarray | None  # [batch, n] int32 parent index in the block, -1 for the root; None = chain
    accepted: np.ndarray  # [batch] int32, accepted draft tokens (bonus not counted)
    tokens: np.ndarray  # [sum(accepted + 1)] int32 committed tokens, request after request
    dt: float  # seconds the verify step took on the engine's clock
    discarded: int = 0  # rows of this verify the engine threw away and the tracer left out

    @property
    def accept_lengths(self) -> np.ndarray:
        return self.accepted + 1


def _array(body: Mapping[str, Any], key: str, expected: int | None) -> np.ndarray:
    raw = body.get(key)
    if not isinstance(raw, (bytes, bytearray)):
        raise DecodeError(f"step '{key}' is {type(raw).__name__}, expected bin")
    if len(raw) % TOKEN_DTYPE.itemsize:
        raise DecodeError(f"step '{key}' has {len(raw)} bytes, not a multiple of 4")
    arr = np.frombuffer(raw, dtype=TOKEN_DTYPE)
    if expected is not None and arr.size != expected:
        raise DecodeError(f"step '{key}' has {arr.size} values, expected {expected}")
    return arr


def _int(body: Mapping[str, Any], key: str, default: int | None = None) -> int:
    val = body.get(key, default)
    if not isinstance(val, int) or isinstance(val, bool) or val < 0:
        raise DecodeError(f"step '{key}' is {val!r}, expected a non-negative integer")
    return val


def step_view(ev: Event) -> StepView:
    b = ev.body
    batch, n = _int(b, "batch"), _int(b, "n")
    rids = b.get("rids")
    if not isinstance(rids, list) or len(rids) != batch:
        raise DecodeError(f"step 'rids' must be a list of {batch} strings")
    draft = _array(b, "draft", batch * n).reshape(batch, n)
    parents = None
    if b.get("parents") is not None:
        parents = _array(b, "parents", batch * n).reshape(batch, n)
    accepted = _array(b, "accepted", batch)
    if batch and (accepted.min() < 0 or accepted.max() >= max(n, 1)):
        raise DecodeError(f"step 'accepted' out of range [0, {n - 1}]")
    tokens = _array(b, "tokens", int(accepted.sum()) + batch)
    dt = b.get("dt", 0.0)
    return StepView(
        step=_int(b, "step", 0),
        batch=batch,
        n=n,
        topk=_int(b, "topk", 1),
        rids=[str(r) for r in rids],
        draft=draft,
        parents=parents,
        accepted=accepted,
        tokens=tokens,
        dt=float(dt) if isinstance(dt, (int, float)) else 0.0,
        discarded=_int(b, "discarded", 0),
    )


def step_body(
    *,
    step: int,
    rids: Sequence[str],
    draft: np.ndarray,
    accepted: np.ndarray,
    tokens: np.ndarray,
    topk: int = 1,
    parents: np.ndarray | None = None,
    dt: float = 0.0,
    discarded: int = 0,
) -> dict[str, Any]:
    """Build the body of a step event from host arrays (draft is [batch, n], root first).

    ``discarded``: rows of this verify left out because the engine threw them away (see protocol.md).
    """
    batch, n = draft.shape
    body = {
        "step": step,
        "batch": batch,
        "n": n,
        "topk": topk,
        "rids": list(rids),
        "draft": column(draft),
        "parents": None if parents is None else column(parents),
        "accepted": column(accepted),
        "tokens": column(tokens),
        "dt": dt,
    }
    if discarded:
        body["discarded"] = discarded
    return body
