"""Write frames, byte for byte as received, into an MCAP file: one channel per source."""

from __future__ import annotations

import math
import time
from typing import BinaryIO

from eagle3_top.tracer.schema import SCHEMA_VERSION, DecodeError, decode
from mcap.writer import CompressionType, Writer

SCHEMA_NAME = f"eagle3-top/v{SCHEMA_VERSION}"
SCHEMA_TEXT = b"msgpack maps as in docs/protocol.md; each message is one frame exactly as received"
MESSAGE_ENCODING = "msgpack"
UNDECODABLE = "undecodable"
PROFILE = "eagle3-top"
# A killed recorder loses the chunk in progress; closing one at least this often bounds the loss.
FLUSH_INTERVAL_S = 1.0
# Large enough that a busy stream still compresses well, small enough to bound memory between flushes.
CHUNK_SIZE = 4 << 20
_U64 = (1 << 64) - 1
# zstd: smaller files (the default); lz4: about 1.5x the write rate for about 1.6x the size
# (benchmarks/bench_record.py, docs/performance.md).
COMPRESSIONS = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}


def _ns(ts: float) -> int | None:
    if not math.isfinite(ts) or ts < 0:
        return None
    return min(int(ts * 1e9), _U64)


class RecordingWriter:
    """Appends frames to ``path``; ``close()`` writes the summary (a reader needs none)."""

    def __init__(
        self, path: str, flush_interval_s: float = FLUSH_INTERVAL_S, compression: str = "zstd"
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression {compression!r}: expected one of {', '.join(COMPRESSIONS)}")
        self._file: BinaryIO = open(path, "wb")  # closed in close(), not a with: it lives for the run
        self._writer = Writer(self._file, chunk_size=CHUNK_SIZE, compression=COMPRESSIONS[compression])
        self._writer.start(profile=PROFILE, library="eagle3-top")
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

    def add(self, frame: bytes, endpoint: str, recv_ns: int | None = None) -> None:
        recv_ns = time.time_ns() if recv_ns is None else recv_ns
        try:
            ev = decode(frame)
        except DecodeError:
            topic, publish_ns, seq = UNDECODABLE, recv_ns, 0
        else:
            topic, publish_ns, seq = ev.src, _ns(ev.ts) or recv_ns, ev.seq & 0xFFFFFFFF
        cid = self._channel(topic, endpoint)
        self._writer.add_message(cid, log_time=recv_ns, data=frame, publish_time=publish_ns, sequence=seq)
        self.frames += 1
        self.bytes += len(frame)

    def tick(self) -> None:
        """Close the chunk in progress if it is older than the flush interval; call it often."""
        now = time.monotonic()
        if now - self._last_flush >= self._interval:
            self._writer.flush()
            self._last_flush = now

    @property
    def file_bytes(self) -> int:
        """Bytes on disk so far (closed chunks and records)."""
        return self._file.tell()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.finish()
        finally:
            self._file.close()
