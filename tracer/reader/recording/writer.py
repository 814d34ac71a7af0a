"""Write frames, byte for byte as received, into an MCAP file: one channel per source."""

from __future__ import annotations

import errno
import math
import os
import stat
import time
from typing import BinaryIO

from eagle3_top.tracer.files import why_not
from eagle3_top.tracer.reader.recording.chunked import ZSTD_LEVEL, ChunkedMcapWriter
from eagle3_top.tracer.schema import SCHEMA_VERSION, Envelope, peek

SCHEMA_NAME = f"eagle3-top/v{SCHEMA_VERSION}"
SCHEMA_TEXT = b"msgpack maps as in docs/protocol.md; each message is one frame exactly as received"
MESSAGE_ENCODING = "msgpack"
UNDECODABLE = "undecodable"
# MCAP numbers channels with 16 bits, and each costs the recorder memory: past this many, frames of
# sources not met yet (a flood of invented ids) share one channel per endpoint. Every byte is still
# recorded; the frame itself names its source, and the readers go by that.
MAX_CHANNELS = 4096
MANY_SOURCES = "many-sources"
PROFILE = "eagle3-top"
# The recorder's own account of the file, a metadata record written on a clean close: the frames
# it wrote, those it received and did not write (a relay's recorder that fell behind), and the
# frames its sources numbered that never reached it (seq gaps), as its stop line said them.
RECORDER_METADATA = "eagle3-top/recorder"
# A killed recorder loses the chunk in progress; closing one at least this often bounds the loss.
FLUSH_INTERVAL_S = 1.0
# Bounds the memory between flushes; from 1 to 16 MB neither the rate nor the size of a busy
# stream changes (benchmarks/bench_record.py --sweep).
CHUNK_SIZE = 4 << 20
_U64 = (1 << 64) - 1
# zstd at level 1 is the default: level 3's files are 4 - 6% smaller but it writes at 0.7x the rate,
# short of 50,000 step events/s on one core; lz4 writes 1.3x bigger files at about the same rate
# (benchmarks/bench_record.py, docs/performance.md).
COMPRESSIONS = {"zstd": "zstd", "lz4": "lz4", "none": ""}


_MAX_TS_S = _U64 / 1e9  # 2^64 ns after the epoch: the year 2554


class RecordingBusy(OSError):
    """Another recorder holds the file: two writers would interleave chunks into garbage."""


def _open_for_recording(path: str, exclusive: bool) -> BinaryIO:
    """Open ``path`` for writing under an advisory lock, truncating only once the lock is ours, so
    a second recorder aimed at the same file (even with --force) fails without harming the first.
    ``exclusive``: the file must not exist yet (created atomically: no check-then-create race)."""
    try:
        # not blocking: a FIFO nobody reads would hold the open forever (ENXIO instead)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_EXCL if exclusive else 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a FIFO (named pipe) that nobody reads", path) from None
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, why_not(path, exc), path) from None
        raise
    os.set_blocking(fd, True)
    try:
        try:
            import fcntl
        except ImportError:  # not POSIX: no advisory locks to take
            pass
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RecordingBusy(errno.EBUSY, "another recorder is writing it", path) from None
        if stat.S_ISREG(os.fstat(fd).st_mode):  # a device (/dev/full, a pipe) has nothing to cut
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def _ns(ts: float) -> int | None:
    if not math.isfinite(ts) or ts < 0:
        return None
    if ts >= _MAX_TS_S:  # a hostile ts of 1e308 would overflow int() below
        return _U64
    return min(int(ts * 1e9), _U64)


class RecordingWriter:
    """Appends frames to ``path``; ``close()`` writes the summary (a reader needs none)."""

    def __init__(
        self,
        path: str,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        compression: str = "zstd",
        zstd_level: int = ZSTD_LEVEL,
        exclusive: bool = False,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression {compression!r}: expected one of {', '.join(COMPRESSIONS)}")
        # closed in close(), not a with: it lives for the run; the lock goes with it
        self._file: BinaryIO = _open_for_recording(path, exclusive)
        self._writer = ChunkedMcapWriter(
            self._file, profile=PROFILE, library="eagle3-top", chunk_size=CHUNK_SIZE,
            compression=COMPRESSIONS[compression], zstd_level=zstd_level,
        )  # fmt: skip
        self._schema = self._writer.register_schema(SCHEMA_NAME, "text", SCHEMA_TEXT)
        self._channels: dict[tuple[str, str], int] = {}
        self._interval = flush_interval_s
        self._last_flush = time.monotonic()
        self.frames = 0
        self.bytes = 0
        self.closed = False

    def _channel(self, topic: str, endpoint: str) -> int:
        # keyed by endpoint too: the same source id seen through two endpoints stays two channels
        key = (topic, endpoint)
        cid = self._channels.get(key)
        if cid is None:
            cid = self._writer.register_channel(topic, MESSAGE_ENCODING, self._schema, {"endpoint": endpoint})
            self._channels[key] = cid
        return cid

    def add(self, frame: bytes, endpoint: str, recv_ns: int | None = None) -> Envelope | None:
        """Append one frame; returns its envelope (None when ``decode`` would reject the frame), so
        the caller can count sequence gaps without reading the frame a second time."""
        if recv_ns is None:
            recv_ns = time.time_ns()
        env = peek(frame)
        if env is None:
            self._writer.add_message(self._channel(UNDECODABLE, endpoint), recv_ns, frame, recv_ns, 0)
        else:
            ts = env.ts
            # from 1 s to the year 2286, ts * 1e9 is a positive u64 without a second look
            publish_ns = int(ts * 1e9) if 1.0 <= ts < 1e10 else (_ns(ts) or recv_ns)
            cid = self._channels.get((env.src, endpoint))
            if cid is None:
                many = len(self._channels) >= MAX_CHANNELS
                cid = self._channel(MANY_SOURCES if many else env.src, endpoint)
            self._writer.add_message(cid, recv_ns, frame, publish_ns, env.seq & 0xFFFFFFFF)
        self.frames += 1
        self.bytes += len(frame)
        return env

    def tick(self) -> None:
        """Close the chunk in progress if it is older than the flush interval; call it often."""
        now = time.monotonic()
        if now - self._last_flush >= self._interval:
            self._writer.flush()
            self._last_flush = now

    @property
    def file_bytes(self) -> int:
        """Bytes written so far (closed chunks and records)."""
        return self._writer.position

    def close(self, not_written: int | None = 0, missed: int | None = None) -> None:
        """Write the summary, with the recorder's account: ``not_written``, frames that reached the
        recorder and are not in the file; ``missed``, seq gaps it counted. None: not known."""
        if self.closed:
            return
        self.closed = True
        account = {"frames": str(self.frames)}
        for key, n in (("not_written", not_written), ("missed", missed)):
            if n is not None:
                account[key] = str(n)
        try:
            self._writer.add_metadata(RECORDER_METADATA, account)
            self._writer.finish()
        finally:
            self._file.close()
