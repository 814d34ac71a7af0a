"""Where reading can start again after bytes whose record framing is damaged.

Only two places qualify: a whole chunk record whose fields add up (the chance that compressed bytes
do so by accident is negligible), and the data end record that a closed file's footer points at.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

MAGIC = b"\x89MCAP0\r\n"
_CHUNK = 0x06
_DATA_END = 0x0F
_FOOTER = 0x02
_FRAMING = struct.Struct("<BQ")
CHUNK_FIXED = struct.Struct("<QQQII")  # start time, end time, uncompressed size, crc, compression length
_FOOTER_RECORD = struct.Struct("<BQQQI")  # opcode, length 20, summary start, summary offset start, crc
_DATA_END_BYTES = _FRAMING.pack(_DATA_END, 4)
_COMPRESSIONS = (b"", b"zstd", b"lz4")
_HEAD_MAX = _FRAMING.size + CHUNK_FIXED.size + 4 + 8  # the longest chunk header: "zstd" compression
# Past this, no chunk of a recorder (4 MiB chunks, frames of at most 64 MiB) nor of any sane writer.
MAX_CHUNK = 1 << 30
_BLOCK = 1 << 20

_YES, _NO, _LATER = "yes", "no", "later"


def _chunk_at(buf: bytes, i: int, offset: int, size: int) -> str:
    """Does a whole chunk record start at ``buf[i]`` (file offset ``offset``)? ``_LATER``: it may,
    but not all of it is in the file yet."""
    if len(buf) - i < _FRAMING.size + CHUNK_FIXED.size:
        return _LATER
    _, length = _FRAMING.unpack_from(buf, i)
    start, end, usize, _, clen = CHUNK_FIXED.unpack_from(buf, i + _FRAMING.size)
    if clen not in (0, 3, 4) or start > end or usize > MAX_CHUNK:
        return _NO
    at = i + _FRAMING.size + CHUNK_FIXED.size
    if len(buf) - at < clen + 8:
        return _LATER
    compression = buf[at : at + clen]
    (dlen,) = struct.unpack_from("<Q", buf, at + clen)
    if compression not in _COMPRESSIONS or length != CHUNK_FIXED.size + clen + 8 + dlen:
        return _NO
    if compression == b"" and usize != dlen:
        return _NO
    return _LATER if offset + _FRAMING.size + length > size else _YES


def find_chunk(f: BinaryIO, start: int, size: int) -> tuple[int | None, int]:
    """The offset of the first whole chunk record at or after ``start``, or None; and where a later
    search (on a file that has grown since) should resume."""
    pos = start
    while pos < size:
        f.seek(pos)
        buf = f.read(_BLOCK + _HEAD_MAX)
        i = buf.find(_CHUNK)
        while 0 <= i < _BLOCK:
            verdict = _chunk_at(buf, i, pos + i, size)
            if verdict == _YES:
                return pos + i, pos + i
            if verdict == _LATER:
                return None, pos + i  # may be whole once the writer is done with it
            i = buf.find(_CHUNK, i + 1)
        if len(buf) <= _BLOCK:
            return None, pos + len(buf)
        pos += _BLOCK
    return None, max(pos, start)


def find_data_end(f: BinaryIO, size: int) -> int | None:
    """The offset of the data end record of a closed file, found through its footer; None when the
    file does not end in a footer and the magic."""
    tail = _FOOTER_RECORD.size + len(MAGIC)
    if size < len(MAGIC) + tail:
        return None
    f.seek(size - tail)
    buf = f.read(tail)
    op, length, summary_start, _, _ = _FOOTER_RECORD.unpack_from(buf)
    if buf[-len(MAGIC) :] != MAGIC or op != _FOOTER or length != _FOOTER_RECORD.size - _FRAMING.size:
        return None
    # the summary starts right after the data end; without a summary, the footer does
    after = summary_start if summary_start else size - tail
    at = after - len(_DATA_END_BYTES) - 4
    if not len(MAGIC) <= at < size - tail:
        return None
    f.seek(at)
    return at if f.read(len(_DATA_END_BYTES)) == _DATA_END_BYTES else None
