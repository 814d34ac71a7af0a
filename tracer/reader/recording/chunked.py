"""A chunked MCAP writer for one hot path: many small messages a second, a chunk closed often.

The records are the ones the mcap library's ``Writer`` writes (channels and schemas inside the
chunks, message indexes after each chunk, a summary of schemas, channels, statistics and chunk
indexes), so that any MCAP reader reads the file as before. Ours exists for two reasons measured
in benchmarks/bench_record.py: the library spends several microseconds of Python per message
(a dataclass, a dozen buffer writes and seeks), and it compresses zstd at level 3, which it does
not let a caller change: twice level 1's time for files 4 - 6% smaller on this stream.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from functools import partial
from typing import BinaryIO

import lz4.frame
import zstandard
from mcap.data_stream import RecordBuilder
from mcap.opcode import Opcode
from mcap.records import (
    Channel,
    ChunkIndex,
    DataEnd,
    Footer,
    Header,
    Metadata,
    MetadataIndex,
    Schema,
    Statistics,
    SummaryOffset,
)

MAGIC = b"\x89MCAP0\r\n"
# opcode, record length, channel id, sequence, log time, publish time: one pack per message
_MESSAGE = struct.Struct("<BQHIQQ")
_MESSAGE_FIXED = _MESSAGE.size - 9  # the record length counts what follows opcode and length
_CHUNK_HEAD = struct.Struct("<BQQQQI")  # opcode, length, start, end, uncompressed size, crc
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_FOOTER_HEAD = struct.Struct("<BQQQ")  # what the summary CRC covers of the footer

ZSTD_LEVEL = 1


def _compressor(compression: str, zstd_level: int) -> Callable[[bytearray], bytes]:
    # Both compressors checksum what they compress (xxHash, inside the frame): a damaged chunk fails
    # its decompression in any reader, and the chunk's own CRC32, a second pass over every byte
    # (1 µs of the ~12 µs a 4 KB frame costs the writer), is left at 0, "not computed" in MCAP's terms.
    if compression == "zstd":
        # one compressor for the file, its context reused from chunk to chunk
        return zstandard.ZstdCompressor(level=zstd_level, write_checksum=True).compress
    if compression == "lz4":
        return partial(lz4.frame.compress, content_checksum=True)
    if compression == "":
        return bytes
    raise ValueError(f"compression {compression!r}: expected zstd, lz4 or ''")


class ChunkedMcapWriter:
    """Writes MCAP to ``stream``: ``add_message`` appends to the chunk in progress, which closes
    once it holds ``chunk_size`` bytes or on ``flush()``; ``finish()`` writes the summary."""

    def __init__(
        self,
        stream: BinaryIO,
        *,
        profile: str,
        library: str,
        chunk_size: int,
        compression: str,
        zstd_level: int = ZSTD_LEVEL,
    ) -> None:
        self._stream = stream
        self._compression = compression
        self._compress = _compressor(compression, zstd_level)
        self._chunk_size = chunk_size
        self._buf = bytearray()
        self._index: dict[int, list[int]] = {}  # channel -> log time, offset, log time, offset, ...
        self._start = self._end = -1  # log times of the chunk in progress (-1: no message yet)
        self._schemas: list[Schema] = []
        self._channels: list[Channel] = []
        self._chunk_indexes: list[ChunkIndex] = []
        self._metadata: list[Metadata] = []  # written at finish, after the last chunk
        self._counts: dict[int, int] = {}
        self._messages = 0
        self._first = self._last = -1
        self._pos = 0
        self._write(MAGIC)
        rb = RecordBuilder()
        Header(profile, library).write(rb)
        self._write(rb.end())

    @property
    def position(self) -> int:
        """Bytes handed to the stream so far (closed chunks and records)."""
        return self._pos

    def _write(self, data: bytes | bytearray) -> None:
        self._stream.write(data)
        self._pos += len(data)

    def register_schema(self, name: str, encoding: str, data: bytes) -> int:
        schema = Schema(len(self._schemas) + 1, data, encoding, name)
        self._schemas.append(schema)
        rb = RecordBuilder()
        schema.write(rb)
        self._buf += rb.end()
        return schema.id

    def register_channel(
        self, topic: str, message_encoding: str, schema_id: int, metadata: dict[str, str]
    ) -> int:
        channel = Channel(len(self._channels) + 1, topic, message_encoding, metadata, schema_id)
        self._channels.append(channel)
        rb = RecordBuilder()
        channel.write(rb)
        self._buf += rb.end()  # in the chunk, as the library does: a lost chunk loses its channels
        return channel.id

    def add_message(
        self, channel_id: int, log_time: int, data: bytes, publish_time: int, sequence: int
    ) -> None:
        buf = self._buf
        index = self._index.get(channel_id)
        if index is None:
            index = self._index[channel_id] = []
        index += (log_time, len(buf))
        buf += _MESSAGE.pack(
            Opcode.MESSAGE, _MESSAGE_FIXED + len(data), channel_id, sequence, log_time, publish_time
        )
        buf += data
        if self._start < 0 or log_time < self._start:
            self._start = log_time
        if log_time > self._end:
            self._end = log_time
        if len(buf) >= self._chunk_size:
            self._close_chunk()

    def _close_chunk(self) -> None:
        if not self._index:  # no message: schemas and channels wait for the next one
            return
        buf, compression = self._buf, self._compression
        data = self._compress(buf)
        crc = 0 if compression else zlib.crc32(buf)  # uncompressed: nothing else checks the bytes
        offset = self._pos
        head = _CHUNK_HEAD.pack(
            Opcode.CHUNK, 8 * 3 + 4 + 4 + len(compression) + 8 + len(data),
            self._start, self._end, len(buf), crc,
        )  # fmt: skip
        self._write(head + _U32.pack(len(compression)) + compression.encode() + _U64.pack(len(data)))
        self._write(data)
        chunk_length = self._pos - offset
        offsets: dict[int, int] = {}
        index_start = self._pos
        for cid, flat in self._index.items():
            offsets[cid] = self._pos
            # MessageIndex: channel id, then (log time, offset) pairs behind their byte length
            n = len(flat)
            self._write(struct.pack(f"<BQHI{n}Q", Opcode.MESSAGE_INDEX, 6 + 8 * n, cid, 8 * n, *flat))
            self._counts[cid] = self._counts.get(cid, 0) + n // 2
            self._messages += n // 2
        index_length = self._pos - index_start
        self._chunk_indexes.append(
            ChunkIndex(
                message_start_time=self._start, message_end_time=self._end, chunk_start_offset=offset,
                chunk_length=chunk_length, message_index_offsets=offsets, message_index_length=index_length,
                compression=compression, compressed_size=len(data), uncompressed_size=len(buf),
            )
        )  # fmt: skip
        if self._first < 0 or self._start < self._first:
            self._first = self._start
        self._last = max(self._last, self._end)
        self._buf = bytearray()
        self._index = {}
        self._start = self._end = -1

    def add_metadata(self, name: str, metadata: dict[str, str]) -> None:
        """A metadata record, written by ``finish`` after the last chunk and indexed in the summary."""
        self._metadata.append(Metadata(name, metadata))

    def flush(self) -> None:
        """Close the chunk in progress (if it holds a message) and flush the stream."""
        self._close_chunk()
        self._stream.flush()

    def finish(self) -> None:
        """Close the last chunk and write the summary section and the footer; the stream stays open."""
        # Definitions registered after the last message stay out of the data section, as with the
        # library: the summary repeats every schema and channel.
        self._close_chunk()
        indexes: list[MetadataIndex] = []
        for record in self._metadata:
            rb = RecordBuilder()
            record.write(rb)
            data = rb.end()
            indexes.append(MetadataIndex(self._pos, len(data), record.name))
            self._write(data)
        rb = RecordBuilder()
        DataEnd(0).write(rb)
        self._write(rb.end())
        start = self._pos
        rb = RecordBuilder()
        groups: list[SummaryOffset] = []
        for opcode, records in (
            (Opcode.SCHEMA, self._schemas),
            (Opcode.CHANNEL, self._channels),
            (Opcode.STATISTICS, [self._statistics()]),
            (Opcode.CHUNK_INDEX, self._chunk_indexes),
            (Opcode.METADATA_INDEX, indexes),
        ):
            if not records:  # no metadata: the summary as before
                continue
            group = rb.count
            for rec in records:
                rec.write(rb)
            groups.append(SummaryOffset(opcode, start + group, rb.count - group))
        offsets_start = start + rb.count
        for g in groups:
            g.write(rb)
        summary = rb.end()
        crc = zlib.crc32(
            _FOOTER_HEAD.pack(Opcode.FOOTER, 8 + 8 + 4, start, offsets_start), zlib.crc32(summary)
        )
        rb = RecordBuilder()
        Footer(start, offsets_start, crc).write(rb)
        self._write(summary + rb.end() + MAGIC)
        self._stream.flush()

    def _statistics(self) -> Statistics:
        return Statistics(
            message_count=self._messages, schema_count=len(self._schemas), channel_count=len(self._channels),
            attachment_count=0, metadata_count=len(self._metadata), chunk_count=len(self._chunk_indexes),
            message_start_time=max(self._first, 0), message_end_time=max(self._last, 0),
            channel_message_counts=self._counts,
        )  # fmt: skip
