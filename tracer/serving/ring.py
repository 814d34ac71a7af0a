"""A byte ring in shared memory between the serving process (producer) and its sidecar (consumer).

Why: the sender thread's Python, sharing the serving process's GIL, cost a scheduler 8 – 11 % of
its iterations on an H100 host (docs/performance.md). With the ring, the serving process only
copies each step's columns into shared memory; the sidecar process resolves, encodes and sends.

Layout (little-endian): a 256-byte header, then ``capacity`` bytes of records. Positions are byte
counts that only grow (``offset = pos % capacity``); the producer alone writes ``write_pos``, the
consumer alone ``read_pos``, each an aligned 8-byte store, so neither needs a lock across processes
(x86-64 keeps stores in order). A record is a 16-byte header (record length, payload length, kind,
events lost just before it) and its payload, padded to 16 bytes; a record that would cross the end
is preceded by a pad record to the end. A record that does not fit the free space is dropped and
counted: the serving thread never waits.

The file lives in ``/dev/shm`` and is unlinked as soon as it is open: the sidecar gets the open
descriptor, so nothing is left behind when either process dies.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

MAGIC = 0x31474E4952543345  # b"E3TRING1" little-endian
HEADER = 256
ALIGN = 16
REC = struct.Struct("<IIHHI")  # record length, payload length, kind, reserved, events lost before it
PAD = 0  # the record kind that fills the end of the ring before a wrap
# what the serving process writes (tracer/serving/ring_publisher.py) and the sidecar reads
STEP_RECORD = 1  # a verify step's columns (``step_record``)
EVENT_RECORD = 2  # msgpack [kind, ts, body]: an event built in the serving process (aux, probe)
HELLO_RECORD = 3  # msgpack body: the hello, repeated by the sidecar
STATE_RECORD = 4  # msgpack {n, last_error, engine_error, now}: the tracer's errors
CLOSE_RECORD = 5  # the serving process closed the tracer: send the final health and exit

# header offsets (8-byte fields)
_MAGIC, _CAP, _WRITE, _READ, _WRITTEN, _DROPPED = 0, 8, 16, 24, 32, 40
# the serving process's state, mirrored into health events by the sidecar
STATE_FIELDS = {"hook_errors": 48, "discarded_rows": 56, "paused": 64, "disabled": 72}
_STARTED, _STATE_ACK = 80, 88
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")


def _nbytes(part: Any) -> int:
    """A part's bytes (a memoryview counts its bytes, not its items)."""
    return part.nbytes if isinstance(part, memoryview) else len(part)


def payload_size(parts: Sequence[Any]) -> int:
    """The bytes of ``parts`` laid end to end."""
    return sum(map(_nbytes, parts))


class RingError(RuntimeError):
    """The ring's bytes are not what a producer of ours writes (one line)."""


def _dirs() -> list[str]:
    shm = ["/dev/shm"] if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else []
    return [*shm, tempfile.gettempdir()]


class Ring:
    """One side of the ring. ``create`` makes it (the producer), ``attach`` opens it from the
    descriptor the producer passed down (the consumer)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, size)
        self.buf = memoryview(self._map)
        # the mapping's address, for ``memmove``s straight into it (step records); this export
        # blocks ``mmap.close()`` until ``close`` drops it
        self._anchor: ctypes.c_char | None = ctypes.c_char.from_buffer(self._map)
        self.base = ctypes.addressof(self._anchor)
        self.capacity = size - HEADER
        self._lock = threading.Lock()  # producers of one process (the serving and aux threads)
        self._lost = 0  # records dropped since the last one written (this process's side)

    @classmethod
    def create(cls, capacity: int) -> Ring:
        """A new ring, its file already unlinked. Its pages are reserved here: a sparse file on a
        full ``/dev/shm`` (a container's is 64 MB by default) would kill the serving process with
        SIGBUS at the first write to a page that cannot be had. Where ``/dev/shm`` cannot hold it,
        the temporary directory does (page cache); OSError where neither can."""
        capacity = max(ALIGN * 64, capacity - capacity % ALIGN)
        why = ""
        for where in _dirs():
            fd, path = tempfile.mkstemp(prefix="eagle3-top-ring-", dir=where)
            try:
                os.unlink(path)
                os.posix_fallocate(fd, 0, HEADER + capacity)
                ring = cls(fd, HEADER + capacity)
            except OSError as exc:
                os.close(fd)
                why += f"{where}: {exc.strerror or exc}; "
                continue
            except BaseException:
                os.close(fd)
                raise
            _U64.pack_into(ring.buf, _CAP, capacity)
            _U64.pack_into(ring.buf, _MAGIC, MAGIC)
            return ring
        raise OSError(f"no room for the tracer's {capacity >> 20} MiB ring ({why.rstrip('; ')})")

    @classmethod
    def attach(cls, fd: int) -> Ring:
        size = os.fstat(fd).st_size
        if size <= HEADER:
            raise RingError(f"ring descriptor {fd}: {size} bytes, not a ring")
        ring = cls(fd, size)
        if _U64.unpack_from(ring.buf, _MAGIC)[0] != MAGIC or ring._get(_CAP) != ring.capacity:
            raise RingError(f"ring descriptor {fd}: not an eagle3-top ring (bad magic or capacity)")
        return ring

    def close(self) -> None:
        self._anchor = None
        try:
            self.buf.release()
            self._map.close()
        except (BufferError, ValueError):
            pass  # a view still held somewhere: the mapping goes with the process
        try:
            os.close(self.fd)
        except OSError:
            pass

    # -- header fields -------------------------------------------------------------------------

    def _get(self, off: int) -> int:
        return int(_U64.unpack_from(self.buf, off)[0])

    def _set(self, off: int, value: int) -> None:
        _U64.pack_into(self.buf, off, value)

    @property
    def written(self) -> int:
        return self._get(_WRITTEN)

    @property
    def dropped(self) -> int:
        """Records the producer could not write (the ring was full)."""
        return self._get(_DROPPED)

    def count_dropped(self, n: int = 1) -> None:
        """``n`` events lost on the producer's side before reaching the ring: the next record says
        so, and the sidecar leaves as many sequence numbers out."""
        with self._lock:
            self._lost += n
            self._set(_DROPPED, self._get(_DROPPED) + n)

    def pending_bytes(self) -> int:
        return self._get(_WRITE) - self._get(_READ)

    def set_field(self, name: str, value: int) -> None:
        """One of the serving process's counters (``STATE_FIELDS``), for the sidecar's health."""
        _U64.pack_into(self.buf, STATE_FIELDS[name], int(value))

    def set_started(self, when: float) -> None:
        _F64.pack_into(self.buf, _STARTED, when)

    def state(self) -> dict[str, Any]:
        """The serving process's counters as the sidecar reads them."""
        out: dict[str, Any] = {name: self._get(off) for name, off in STATE_FIELDS.items()}
        out["paused"], out["disabled"] = bool(out["paused"]), bool(out["disabled"])
        out["started"] = _F64.unpack_from(self.buf, _STARTED)[0]
        return out

    @property
    def state_acked(self) -> int:
        """The last state record the sidecar has turned into a sent health event."""
        return self._get(_STATE_ACK)

    def ack_state(self, n: int) -> None:
        self._set(_STATE_ACK, n)

    # -- producer ------------------------------------------------------------------------------

    def write(self, kind: int, parts: Sequence[Any]) -> bool:
        """Append one record whose payload is ``parts`` (bytes-like, C-contiguous) laid end to end.
        False, and nothing written, when it does not fit the free space now: the record is counted
        as dropped (``count_dropped``) unless ``try_write`` asked."""
        if self.try_write(kind, parts):
            return True
        self.count_dropped()
        return False

    def try_write(self, kind: int, parts: Sequence[Any]) -> bool:
        """``write`` that counts nothing when the record does not fit (the caller waits and tries
        again: the aux thread, never the serving thread)."""
        size = payload_size(parts)

        def fill(buf: Any, base: int, at: int) -> None:
            for p in parts:
                n = _nbytes(p)
                buf[at : at + n] = p
                at += n

        return self.try_write_with(kind, size, fill)

    def write_with(self, kind: int, size: int, fill: Callable[[Any, int, int], None]) -> bool:
        """``write`` of a payload of ``size`` bytes that ``fill(buf, base, at)`` writes in place at
        ``buf[at:]`` (memory address ``base + at``): no parts made first. Counted when dropped."""
        if self.try_write_with(kind, size, fill):
            return True
        self.count_dropped()
        return False

    def try_write_with(self, kind: int, size: int, fill: Callable[[Any, int, int], None]) -> bool:
        """``write_with`` that counts nothing when the record does not fit. ``fill`` writes exactly
        ``size`` bytes; if it raises, nothing is published."""
        total = (REC.size + size + ALIGN - 1) & ~(ALIGN - 1)
        buf, cap = self.buf, self.capacity
        with self._lock:
            wp = _U64.unpack_from(buf, _WRITE)[0]
            off = wp % cap
            rest = cap - off
            need = total + rest if total > rest else total
            if need > cap - (wp - _U64.unpack_from(buf, _READ)[0]):
                return False
            if total > rest:  # pad to the end, start over at 0
                REC.pack_into(buf, HEADER + off, rest, 0, PAD, 0, 0)
                wp += rest
                off = 0
            fill(buf, self.base, HEADER + off + REC.size)
            lost, self._lost = self._lost, 0
            REC.pack_into(buf, HEADER + off, total, size, kind, 0, min(lost, 0xFFFFFFFF))
            # the record is whole before the consumer may see it
            _U64.pack_into(buf, _WRITE, wp + total)
            _U64.pack_into(buf, _WRITTEN, _U64.unpack_from(buf, _WRITTEN)[0] + 1)
        return True

    def fits(self, size: int) -> bool:
        """Whether a payload of ``size`` bytes could ever be written (half the ring at most, so a
        wrap's padding still leaves room)."""
        return REC.size + size + ALIGN <= self.capacity // 2

    # -- consumer ------------------------------------------------------------------------------

    def take(self, limit: int = 256) -> list[tuple[int, int, bytes]]:
        """Up to ``limit`` records (kind, events lost before it, payload copied out), oldest first;
        their space is given back. Raises ``RingError`` on bytes no producer of ours wrote."""
        buf, cap = self.buf, self.capacity
        rp = self._get(_READ)
        wp = self._get(_WRITE)
        out: list[tuple[int, int, bytes]] = []
        while rp < wp and len(out) < limit:
            off = rp % cap
            total, size, kind, _, lost = REC.unpack_from(buf, HEADER + off)
            if (
                total < REC.size
                or total % ALIGN
                or total > cap - off
                or total > wp - rp
                or size > total - REC.size
            ):
                raise RingError(f"ring record at byte {rp}: length {total} / payload {size} out of bounds")
            if kind != PAD:
                at = HEADER + off + REC.size
                out.append((kind, lost, bytes(buf[at : at + size])))
            rp += total
        self._set(_READ, rp)
        return out
