"""The envelope every event carries, and the frame it travels in."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack
from eagle3_top.tracer.schema.shared import Shared
from eagle3_top.tracer.schema.text import printable

SCHEMA_VERSION = 1

HELLO = "hello"
STEP = "step"
AUX = "aux"
PROBE = "probe"
HEALTH = "health"
KINDS = frozenset({HELLO, STEP, AUX, PROBE, HEALTH})

MAX_FRAME_BIN = 64 << 20  # the largest bin a frame may carry (a probe's rows)
MAX_SRC = 256  # HOST:PID:rRANK; a host name is at most 253 characters
MAX_SEQ = (1 << 63) - 1
# Lists and maps nested in a frame's map. Ours nest a few levels (the deepest is a hello's
# eagle_config, the draft config's own map); a deeper frame, valid msgpack whose unknown keys the
# protocol says to ignore, would still make a recursive reader of it (a copy, a repr, a JSON dump)
# run out of stack.
MAX_DEPTH = 32
_CONTAINERS = frozenset((list, dict))  # all msgpack decodes to that can hold more


class DecodeError(ValueError):
    """A frame or body that is not valid v1; the message says what is wrong in one line."""


class BadFrame(DecodeError):
    """A frame with a valid envelope that is refused whole (nested too deep): it names its source
    and sequence number, so a reader counts it against that source, not as a hole."""

    def __init__(self, message: str, src: str, seq: int) -> None:
        super().__init__(message)
        self.src = src
        self.seq = seq


def _shallow(v: list[Any] | dict[Any, Any], room: int) -> bool:
    """True when lists and maps nest at most ``room`` levels inside ``v`` (recursing at most that
    deep). Cheap on our frames: a list of strings (a step's rids) passes by one ``join`` at C
    speed, a list of numbers by one C-level scan of its types, a scalar by one type test."""
    for x in v.values() if type(v) is dict else v:
        t = type(x)
        if t is not list and t is not dict:
            continue
        if room == 0:
            return False
        if t is list:
            if not x:
                continue
            if type(x[0]) is str:
                try:
                    "".join(x)
                    continue
                except TypeError:
                    pass
            elif _CONTAINERS.isdisjoint(map(type, x)):  # numbers: no exception raised and caught
                continue
        if not _shallow(x, room - 1):
            return False
    return True


def _event(kind: str, src: str, seq: int, ts: float, msg: dict[str, Any]) -> Event:
    # Sources are named on screen and in verdicts: no escape sequence gets that far.
    shown = src if src.isprintable() else printable(src, MAX_SRC)
    if not _shallow(msg, MAX_DEPTH):
        raise BadFrame(f"{printable(kind, 32)} seq {seq}: nested deeper than {MAX_DEPTH} levels", shown, seq)
    return Event(kind, shown, seq, ts, msg)


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

    @staticmethod
    def local(rank: int = 0, engine: str = "unknown") -> SourceId:
        return SourceId(socket.gethostname(), os.getpid(), rank, engine)


def split_source_key(key: str) -> tuple[str, str, str]:
    """``HOST:PID:rRANK`` → (host, pid, rank); the host may hold ':' itself (IPv6)."""
    parts = key.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return key, "?", "?"


@dataclass
class Event(Shared):
    """One decoded frame; never changed afterwards (``Shared``: a copy is the same event)."""

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
    """Decode one frame's envelope; raises DecodeError for anything that is not a v1 event."""
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False, max_bin_len=MAX_FRAME_BIN)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise DecodeError(f"not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(msg, dict):
        raise DecodeError(f"not a map: top-level {type(msg).__name__}")
    v = msg.pop("v", None)
    if v != SCHEMA_VERSION:
        raise DecodeError(f"schema version {printable(repr(v), 40)}, expected {SCHEMA_VERSION}")
    kind, src, seq, ts = (
        msg.pop("kind", None),
        msg.pop("src", None),
        msg.pop("seq", None),
        msg.pop("ts", None),
    )
    # One test for the frames every publisher of ours sends (``ts - ts`` is 0.0 only for a finite
    # float); the checks below only name what is wrong with the others.
    if (
        type(kind) is str
        and type(src) is str
        and type(seq) is int
        and type(ts) is float
        and ts - ts == 0.0
        and 0 <= seq <= MAX_SEQ
        and 0 < len(src) <= MAX_SRC
        and len(kind) <= 32
    ):
        return _event(kind, src, seq, ts, msg)
    if not isinstance(kind, str):
        raise DecodeError(f"missing or non-string 'kind': {printable(repr(kind), 40)}")
    if len(kind) > 32:
        raise DecodeError(f"'kind' of {len(kind)} characters")
    if not isinstance(src, str) or not src:
        raise DecodeError(f"missing or non-string 'src' in {printable(kind, 32)} event")
    if len(src) > MAX_SRC:
        raise DecodeError(f"'src' of {len(src)} characters (at most {MAX_SRC})")
    if type(seq) is not int or not 0 <= seq <= MAX_SEQ:
        raise DecodeError(f"'seq' {printable(repr(seq), 40)} is not an integer in [0, 2^63)")
    if type(ts) not in (int, float) or not math.isfinite(ts):
        raise DecodeError(f"'ts' {printable(repr(ts), 40)} is not a finite number")
    return _event(kind, src, seq, float(ts), msg)


class Envelope(NamedTuple):
    """What ``peek`` reads of a frame: the envelope as ``decode`` would give it, and the whole map."""

    kind: str
    src: str
    seq: int
    ts: float
    fields: dict[Any, Any]  # the frame's map, envelope keys included (nothing is popped)


def peek(frame: bytes) -> Envelope | None:
    """The envelope of a frame ``decode`` accepts, None for one it rejects, for a reader that only
    routes and counts frames (the recorder): no ``Event``, no error message, no keys popped.

    The whole frame is still unpacked: ``decode`` rejects a frame for any invalid UTF-8, unhashable
    key or trailing byte anywhere in it, and a partial read would accept some of those. The checks
    below are ``decode``'s, in the same order of outcome; tests/test_record_rate.py holds the two to
    the same verdict on fuzzed frames."""
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False, max_bin_len=MAX_FRAME_BIN)
    except Exception:
        return None
    if not isinstance(msg, dict) or msg.get("v") != SCHEMA_VERSION:
        return None
    kind, src, seq, ts = msg.get("kind"), msg.get("src"), msg.get("seq"), msg.get("ts")
    if not (
        type(kind) is str
        and type(src) is str
        and type(seq) is int
        and 0 <= seq <= MAX_SEQ
        and 0 < len(src) <= MAX_SRC
        and len(kind) <= 32
    ):
        return None
    if type(ts) is not float:
        if type(ts) is not int:
            return None
        ts = float(ts)  # decode's slow path: an int ts is accepted as a float (or overflows)
    if ts - ts != 0.0:  # NaN or an infinity
        return None
    if not _shallow(msg, MAX_DEPTH):
        return None
    return Envelope(kind, src if src.isprintable() else printable(src, MAX_SRC), seq, ts, msg)
