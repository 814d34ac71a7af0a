"""The records inside one MCAP chunk, read at the rate replay needs.

The mcap library's ``breakup_chunk`` reads each message field by field through a stream object,
about 6 µs a frame: more than decoding the frame itself. Messages are the only records a chunk
holds in bulk, so they are cut out here with one ``struct`` call each; channel and schema records
(one per source) still go through the library's parsers. Any record that runs past the chunk's
end, a chunk that does not decompress to its stated size, or a CRC that does not match raises
``ValueError``: the caller counts the chunk as bad, as it did with ``breakup_chunk``.
"""

from __future__ import annotations

import struct
import zlib
from io import BytesIO
from typing import Any

import lz4.frame
import zstandard
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Schema

_FRAMING = struct.Struct("<BQ")
_MESSAGE = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
# A chunk's stated size is allocated before decompressing: a hostile header must not claim 1 TB.
# Our recorder closes chunks at 4 MiB; other writers use a few MiB.
MAX_CHUNK_BYTES = 1 << 30

# (channel id, log time ns, publish time ns, data)
MessageRow = tuple[int, int, int, bytes]


def decompressed(chunk: Chunk) -> bytes:
    """The chunk's records, decompressed and checked against its stated size and CRC."""
    size = chunk.uncompressed_size
    if size > MAX_CHUNK_BYTES:
        raise ValueError(f"chunk claims {size} bytes uncompressed (at most {MAX_CHUNK_BYTES} read)")
    if chunk.compression == "zstd":
        data = zstandard.ZstdDecompressor().decompress(chunk.data, max_output_size=size)
    elif chunk.compression == "lz4":
        data = lz4.frame.decompress(chunk.data)
    elif chunk.compression == "":
        data = bytes(chunk.data)
    else:
        raise ValueError(f"chunk compression {chunk.compression[:40]!r} is not supported")
    if len(data) != size:
        raise ValueError(f"chunk decompressed to {len(data)} bytes, its header says {size}")
    if chunk.uncompressed_crc != 0 and zlib.crc32(data) != chunk.uncompressed_crc:
        raise ValueError("chunk CRC does not match its data")
    return data


def chunk_records(data: bytes) -> list[MessageRow | Channel | Schema]:
    """The records of a chunk's decompressed data: messages as ``MessageRow`` tuples, channel and
    schema records as the library's; other record kinds are skipped by their length."""
    out: list[Any] = []
    append = out.append
    unpack_framing, unpack_message = _FRAMING.unpack_from, _MESSAGE.unpack_from
    message, channel, schema = Opcode.MESSAGE, Opcode.CHANNEL, Opcode.SCHEMA
    pos, n = 0, len(data)
    while pos < n:
        if pos + 9 > n:
            raise ValueError(f"record framing cut short at byte {pos} of the chunk")
        op, length = unpack_framing(data, pos)
        start, pos = pos + 9, pos + 9 + length
        if pos > n:
            raise ValueError(f"record at byte {start - 9} of the chunk runs past its end")
        if op == message:
            if length < _MESSAGE.size:
                raise ValueError(f"message record of {length} bytes at byte {start - 9} of the chunk")
            cid, _seq, log_time, publish_time = unpack_message(data, start)
            append((cid, log_time, publish_time, data[start + _MESSAGE.size : pos]))
        elif op == channel:
            append(Channel.read(ReadDataStream(BytesIO(data[start:pos]))))
        elif op == schema:
            append(Schema.read(ReadDataStream(BytesIO(data[start:pos]))))
    return out
