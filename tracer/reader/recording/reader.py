"""Read a recording back: whole, cut short, damaged, or while it is still being written.

The scan walks MCAP's record framing itself (opcode u8, length u64 LE) instead of trusting the
summary: a recorder killed mid-run leaves none, a chunk that fails its CRC or decompression is
skipped by its length, and where the framing itself makes no sense (a damaged length, an unknown
opcode) the scan looks for the next whole chunk and goes on from there. The summary, when the file
has one, is only compared with what the scan found.
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, BinaryIO, NamedTuple

from eagle3_top.tracer.files import open_regular
from eagle3_top.tracer.reader.recording.chunk_data import chunk_records, decompressed
from eagle3_top.tracer.reader.recording.resync import CHUNK_FIXED, MAGIC, find_chunk, find_data_end
from eagle3_top.tracer.reader.recording.writer import PROFILE, RECORDER_METADATA
from eagle3_top.tracer.schema import SCHEMA_VERSION
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, ChunkIndex, Header, Message, Metadata, Schema, Statistics

_FRAMING = struct.Struct("<BQ")
_KNOWN = frozenset(int(op) for op in Opcode)
_VERSION = re.compile(r"eagle3-top/v([0-9]{1,9})")
# A hostile summary could list a million bogus chunks: past this many, lines are only counted.
MAX_MISMATCH_LINES = 20


class NotARecording(ValueError):
    """Not an MCAP file at all: empty, too short, a directory, or without MCAP's magic."""


class UnsupportedRecording(ValueError):
    """An eagle3-top recording of a stream version newer than this reader knows."""


class RecordedFrame(NamedTuple):  # a tuple: made once per frame, a frozen dataclass costs 4x
    log_time_ns: int  # when the recorder received it
    publish_time_ns: int  # the frame's own ts (the receive time when it had none)
    topic: str  # the source id, or "undecodable"
    endpoint: str  # where the recorder received it ("" when the channel's record was lost)
    data: bytes  # the frame, byte for byte


@dataclass
class RecordingReport:
    """What a scan read, and what it could not."""

    size: int = 0
    frames: int = 0
    chunks: int = 0
    bad_chunks: list[tuple[int, str]] = field(default_factory=list)  # (offset, why)
    bad_records: list[tuple[int, str]] = field(default_factory=list)  # other records: (offset, why)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) stepped over
    summary: bool = False  # the footer was reached: the recorder closed the file
    unreadable_tail: int = 0  # bytes at the end no record could be read from
    tail_inside: str = ""  # the kind of record the file ends inside
    pending_tail: int = 0  # bytes at the end not whole yet: the writer may still be at work
    final: bool = False  # nothing more will be read: the summary was reached, or the caller finished
    orphan_frames: int = 0  # frames whose channel record was lost with a bad chunk
    lost_frames: int | None = None  # frames the summary counts that could not be read (None: no count)
    index_mismatch: list[str] = field(default_factory=list)  # where the summary disagrees with the chunks
    profile: str = ""  # the header's profile: "eagle3-top" for ours
    library: str = ""
    schemas: list[str] = field(default_factory=list)  # schema names seen
    stream_version: int | None = None  # N of an eagle3-top/vN schema
    # the recorder's own account, written on a clean close (``RECORDER_METADATA``): ``frames``
    # written, ``not_written`` (received and not written: it fell behind), ``missed`` (seq gaps it
    # counted); None for a file without one (killed, older, another tool's)
    recorder: dict[str, int] | None = None

    @property
    def complete(self) -> bool:
        return (
            self.summary
            and not self.bad_chunks
            and not self.bad_records
            and not self.skipped
            and not self.unreadable_tail
            and not self.index_mismatch
        )

    def describe(self, unfinished: bool = True) -> list[str]:
        """One line per problem. ``unfinished=False`` leaves out what a file still being written
        shows by nature (a tail not whole yet, no summary yet): a reader following it."""
        lines = []
        for offset, why in self.bad_chunks:
            lines.append(f"bad chunk at byte {offset} skipped: {why}")
        for offset, why in self.bad_records:
            lines.append(f"bad record at byte {offset} skipped: {why}")
        for offset, n in self.skipped:
            lines.append(f"{n} bytes skipped at byte {offset}: no record framing there (damaged)")
        if self.tail_inside == "summary":
            lines.append(f"summary section cut short ({self.unreadable_tail} bytes); every frame was read")
        elif self.unreadable_tail:
            where = f"inside a {self.tail_inside} record" if self.tail_inside else "mid-record"
            lines.append(f"file ends {where}: {self.unreadable_tail} bytes unreadable")
        if self.pending_tail and unfinished:
            lines.append(f"last {self.pending_tail} bytes not whole yet (still being written?)")
        if not self.summary and self.tail_inside != "summary" and unfinished:
            lines.append("no summary section (recorder killed, or the file is still being written)")
        if self.lost_frames:
            lines.append(
                f"{self.lost_frames} frames lost (the summary counts {self.frames + self.lost_frames})"
            )
        if self.orphan_frames:
            lines.append(f"{self.orphan_frames} frames whose channel was defined in a lost chunk")
        lines.extend(self.index_mismatch)
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "frames": self.frames,
            "chunks": self.chunks,
            "bad_chunks": [{"offset": o, "error": w} for o, w in self.bad_chunks],
            "bad_records": [{"offset": o, "error": w} for o, w in self.bad_records],
            "skipped": [{"offset": o, "bytes": n} for o, n in self.skipped],
            "summary": self.summary,
            "unreadable_tail": self.unreadable_tail,
            "tail_inside": self.tail_inside,
            "pending_tail": self.pending_tail,
            "final": self.final,
            "orphan_frames": self.orphan_frames,
            "lost_frames": self.lost_frames,
            "index_mismatch": list(self.index_mismatch),
            "profile": self.profile,
            "library": self.library,
            "schemas": list(self.schemas),
            "stream_version": self.stream_version,
            "recorder": self.recorder,
            "complete": self.complete,
        }


def _opname(op: int) -> str:
    return Opcode(op).name.lower().replace("_", " ")


def _span(start_ns: int, end_ns: int) -> str:
    """The receive times a lost chunk held, from its header (intact when only its data is not)."""
    import datetime as dt

    if not 0 < start_ns <= end_ns < 2**63 or end_ns - start_ns > 10**9 * 86_400 * 366:
        return ""  # a damaged or hostile header: no span worth showing
    t0 = dt.datetime.fromtimestamp(start_ns / 1e9, dt.timezone.utc)
    t1 = dt.datetime.fromtimestamp(end_ns / 1e9, dt.timezone.utc)
    return (
        f"; it held the frames received {t0:%Y-%m-%d %H:%M:%S.%f}"[:-3]
        + f" to {t1:%H:%M:%S.%f}"[:-3]
        + f" UTC ({(end_ns - start_ns) / 1e9:.1f} s)"
    )


def _stream(body: bytes) -> ReadDataStream:
    return ReadDataStream(BytesIO(body))


def _chunk_framing_ok(length: int, body: bytes) -> bool:
    """The chunk's own fields add up to its record length: the length prefix was not damaged."""
    if len(body) < CHUNK_FIXED.size + 8:
        return False
    clen = CHUNK_FIXED.unpack_from(body)[4]
    at = CHUNK_FIXED.size + clen
    if at + 8 > len(body):
        return False
    (dlen,) = struct.unpack_from("<Q", body, at)
    return length == at + 8 + dlen


class RecordingReader:
    """The frames of ``path`` in file order.

    Iterate it once for a whole file (``report`` is final when iteration ends), or call
    ``read_available()`` again and again on a file that is still growing, then ``finish()``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.report = RecordingReport()
        self._channels: dict[int, Channel] = {}
        self._offset = 0  # the next record; 0 until the magic was seen
        self._done = False
        self._search: tuple[int, int] = (-1, 0)  # (record offset, searched up to) of a resync in progress
        self._chunk_at: dict[int, int] = {}  # offset -> record bytes, for every chunk whose framing held
        self._per_channel: Counter[int] = Counter()

    def __iter__(self) -> Iterator[RecordedFrame]:
        yield from self._scan(final=True)

    def read_available(self) -> list[RecordedFrame]:
        """Every whole record since the last call. A record that runs past the current end of the
        file is taken as not written yet: the next call starts there (``report.pending_tail``)."""
        return list(self._scan(final=False))

    def finish(self) -> list[RecordedFrame]:
        """What became whole since the last call; then the file is taken as final: what is still
        pending becomes the report's unreadable tail."""
        return list(self._scan(final=True))

    def _open(self) -> BinaryIO:
        if os.path.isdir(self.path):
            raise NotARecording(f"{self.path}: a directory, not a recording")
        return open_regular(self.path)

    def _scan(self, final: bool) -> Iterator[RecordedFrame]:
        if self._done:
            return
        with self._open() as f:
            size = os.fstat(f.fileno()).st_size
            self.report.size = size
            if self._offset == 0 and not self._magic(f, final):
                return
            yield from self._records(f, size, final)
        if final:
            self._done = self.report.final = True

    def _magic(self, f: BinaryIO, final: bool) -> bool:
        head = f.read(len(MAGIC))
        if head == MAGIC:
            self._offset = len(MAGIC)
            return True
        if not MAGIC.startswith(head):
            raise NotARecording(f"{self.path}: not an MCAP file (bad magic)")
        if not final:
            self.report.pending_tail = len(head)
            return False  # created, not written yet
        if not head:
            raise NotARecording(f"{self.path}: empty file, not a recording")
        raise NotARecording(f"{self.path}: {len(head)} bytes, too short to be a recording")

    def _records(self, f: BinaryIO, size: int, final: bool) -> Iterator[RecordedFrame]:
        rep = self.report
        rep.pending_tail = 0
        while self._offset < size:
            offset = self._offset
            f.seek(offset)
            head = f.read(_FRAMING.size)
            if len(head) < _FRAMING.size:
                self._tail(size, final, "")
                return
            op, length = _FRAMING.unpack(head)
            end = offset + _FRAMING.size + length
            if op not in _KNOWN or end > size:
                # A cut-off record, or a damaged length or opcode: a whole chunk further on says which.
                if self._resync(f, size):
                    continue
                self._tail(size, final, _opname(op) if op in _KNOWN else "")
                return
            if op in (Opcode.FOOTER, Opcode.DATA_END):
                self._closing(f, end, size, final)
                return
            if op == Opcode.CHUNK:
                body = f.read(length)
                if not _chunk_framing_ok(length, body):  # its length was damaged: step over, as above
                    if self._resync(f, size):
                        continue
                    self._tail(size, final, "chunk")
                    return
                rep.chunks += 1
                self._chunk_at[offset] = end - offset
                self._offset = end
                yield from self._chunk(offset, body)
            elif op in (Opcode.HEADER, Opcode.SCHEMA, Opcode.CHANNEL, Opcode.MESSAGE):
                record = self._parse(offset, op, f.read(length))
                self._offset = end
                if record is not None:
                    yield from self._use([record])
            elif op == Opcode.METADATA:
                self._recorder(offset, f.read(length))
                self._offset = end
            else:
                self._offset = end  # message indexes, attachments: nothing we need

    def _tail(self, size: int, final: bool, inside: str) -> None:
        if final:
            self.report.unreadable_tail = size - self._offset
            self.report.tail_inside = inside
        else:
            self.report.pending_tail = size - self._offset

    def _resync(self, f: BinaryIO, size: int) -> bool:
        """Move past bytes no record can be read from, to the next whole chunk or the data end; the
        search resumes where it stopped when the same record is tried again on a grown file."""
        offset = self._offset
        start = self._search[1] if self._search[0] == offset else offset + 1
        found, searched = find_chunk(f, start, size)
        self._search = (offset, searched)
        data_end = find_data_end(f, size)
        if data_end is not None and data_end > offset and (found is None or data_end < found):
            found = data_end
        if found is None:
            return False
        self.report.skipped.append((offset, found - offset))
        self._offset = found
        return True

    def _closing(self, f: BinaryIO, end: int, size: int, final: bool) -> None:
        """The data end (or a footer): what follows is the summary, whole when the file ends in the
        magic that a closed writer writes last."""
        rep = self.report
        f.seek(size - len(MAGIC))
        if size - len(MAGIC) >= end and f.read(len(MAGIC)) == MAGIC:
            rep.summary = True
            self._summary(f, end, size - len(MAGIC))
            self._offset = size
            self._done = rep.final = True
        elif final:
            rep.unreadable_tail = size - self._offset
            rep.tail_inside = "summary"
        else:
            rep.pending_tail = size - self._offset

    def _recorder(self, offset: int, body: bytes) -> None:
        """The recorder's account, when this metadata record is it; counts that are not whole
        numbers (a hostile or damaged file) are left out."""
        try:
            meta = Metadata.read(_stream(body))
        except Exception as exc:  # struct, UTF-8 and end-of-data errors share no base class
            self.report.bad_records.append((offset, f"metadata: {type(exc).__name__}: {exc}"[:200]))
            return
        if meta.name != RECORDER_METADATA:
            return
        counts = {}
        for key in ("frames", "not_written", "missed"):
            value = meta.metadata.get(key, "")
            if value.isascii() and value.isdigit() and len(value) <= 18:  # below 10^18
                counts[key] = int(value)
        self.report.recorder = counts

    def _parse(self, offset: int, op: int, body: bytes) -> Any:
        try:
            if op == Opcode.HEADER:
                return Header.read(_stream(body))
            if op == Opcode.SCHEMA:
                return Schema.read(_stream(body))
            if op == Opcode.CHANNEL:
                return Channel.read(_stream(body))
            return Message.read(_stream(body), len(body))
        except Exception as exc:  # struct, UTF-8 and end-of-data errors share no base class
            self.report.bad_records.append((offset, f"{_opname(op)}: {type(exc).__name__}: {exc}"[:200]))
            return None

    def _chunk(self, offset: int, body: bytes) -> Iterator[RecordedFrame]:
        try:
            chunk = Chunk.read(_stream(body))
        except Exception as exc:  # struct errors: the chunk's own header is damaged
            self.report.bad_chunks.append((offset, f"{type(exc).__name__}: {exc}"[:200]))
            return
        try:
            records = chunk_records(decompressed(chunk))
        except Exception as exc:  # zstd, lz4, CRC and framing errors share no base class
            why = f"{type(exc).__name__}: {exc}"[:200]
            self.report.bad_chunks.append(
                (offset, why + _span(chunk.message_start_time, chunk.message_end_time))
            )
            return
        yield from self._use(records)

    def _use(self, records: list[Any]) -> Iterator[RecordedFrame]:
        rep = self.report
        channels, per_channel = self._channels, self._per_channel
        for rec in records:
            if type(rec) is tuple:  # a message of a chunk: (channel id, log time, publish time, data)
                cid, log_time, publish_time, data = rec
                ch = channels.get(cid)
                rep.frames += 1
                per_channel[cid] += 1
                if ch is None:
                    rep.orphan_frames += 1
                    yield RecordedFrame(log_time, publish_time, f"channel {cid} (definition lost)", "", data)
                else:
                    yield RecordedFrame(
                        log_time, publish_time, ch.topic, ch.metadata.get("endpoint", ""), data
                    )
            elif isinstance(rec, Message):  # one outside any chunk
                yield from self._use([(rec.channel_id, rec.log_time, rec.publish_time, bytes(rec.data))])
            elif isinstance(rec, Channel):
                channels[rec.id] = rec
            elif isinstance(rec, Schema):
                self._schema(rec)
            elif isinstance(rec, Header):
                rep.profile, rep.library = rec.profile[:200], rec.library[:200]

    def _schema(self, schema: Schema) -> None:
        rep = self.report
        if schema.name not in rep.schemas and len(rep.schemas) < 16:
            rep.schemas.append(schema.name[:200])
        m = _VERSION.fullmatch(schema.name)
        if rep.profile != PROFILE or m is None:
            return  # another tool's file: its frames are read, and will not decode as ours
        version = int(m.group(1))
        rep.stream_version = max(version, rep.stream_version or 0)
        if version > SCHEMA_VERSION:
            raise UnsupportedRecording(
                f"{self.path}: recorded with stream version v{version}, this eagle3-top reads up to "
                f"v{SCHEMA_VERSION}: upgrade eagle3-top"
            )

    def _summary(self, f: BinaryIO, start: int, stop: int) -> None:
        """Read the summary's statistics and chunk index, and say where they disagree with the scan."""
        stats: Statistics | None = None
        index: list[ChunkIndex] = []
        problems: list[str] = []
        pos = start
        while pos < stop:
            f.seek(pos)
            head = f.read(_FRAMING.size)
            op, length = _FRAMING.unpack(head) if len(head) == _FRAMING.size else (-1, 0)
            if op not in _KNOWN or pos + _FRAMING.size + length > stop:
                problems.append(f"summary section unreadable at byte {pos}")
                break
            if op == Opcode.FOOTER:
                break
            try:
                # read record by record: a hostile file's "summary" may be gigabytes
                if op == Opcode.STATISTICS:
                    stats = Statistics.read(_stream(f.read(length)))
                elif op == Opcode.CHUNK_INDEX:
                    index.append(ChunkIndex.read(_stream(f.read(length))))
                elif op == Opcode.SCHEMA:  # a file of no frames has its schema only here
                    self._schema(Schema.read(_stream(f.read(length))))
            except UnsupportedRecording:
                raise
            except Exception as exc:  # struct, UTF-8 and end-of-data errors share no base class
                problems.append(f"summary {_opname(op)} record at byte {pos} unreadable: {exc}"[:200])
            pos += _FRAMING.size + length
        problems += self._disagreements(stats, index)
        if len(problems) > MAX_MISMATCH_LINES:
            more = len(problems) - MAX_MISMATCH_LINES + 1
            problems = problems[: MAX_MISMATCH_LINES - 1] + [f"and {more} more disagreements of the summary"]
        self.report.index_mismatch = problems

    def _disagreements(self, stats: Statistics | None, index: list[ChunkIndex]) -> list[str]:
        rep = self.report
        out = []
        # Counts only compare where nothing was lost: a lost chunk already explains a lower count.
        whole = not (rep.bad_chunks or rep.bad_records or rep.skipped)
        if stats is not None and not whole and stats.message_count > rep.frames:
            rep.lost_frames = stats.message_count - rep.frames
        if stats is not None and whole:
            if stats.message_count != rep.frames:
                out.append(f"summary says {stats.message_count} frames, the chunks hold {rep.frames}")
            elif stats.chunk_count != rep.chunks:
                out.append(f"summary says {stats.chunk_count} chunks, the file holds {rep.chunks}")
            else:
                for cid in sorted(set(stats.channel_message_counts) | set(self._per_channel)):
                    said, held = stats.channel_message_counts.get(cid, 0), self._per_channel.get(cid, 0)
                    if said != held:
                        out.append(f"summary says channel {cid} has {said} frames, the chunks hold {held}")
        if not index:
            return out  # a writer may leave the chunk index out; that is no disagreement
        indexed = {ci.chunk_start_offset: ci.chunk_length for ci in index}
        for offset, length in sorted(indexed.items()):
            seen = self._chunk_at.get(offset)
            if seen is None:
                if not any(o <= offset < o + n for o, n in rep.skipped):  # already reported as skipped
                    out.append(f"summary indexes a chunk at byte {offset} that is not there")
            elif seen != length:
                out.append(f"summary says the chunk at byte {offset} is {length} bytes, it is {seen}")
        for offset in sorted(set(self._chunk_at) - set(indexed)):
            out.append(f"the chunk at byte {offset} is missing from the summary's index")
        return out


def read_recording(path: str) -> RecordingReader:
    """The frames of a recording, in file order (iterate it); its ``report`` says what was lost."""
    return RecordingReader(path)
