"""Read a recording back, including one cut short or damaged.

The scan walks MCAP's record framing itself (opcode u8, length u64 LE) instead of trusting the
summary: a recorder killed mid-run leaves none, and a chunk that fails its CRC or decompression
is skipped by its length so that the chunks after it still count.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, Message
from mcap.stream_reader import breakup_chunk

MAGIC = b"\x89MCAP0\r\n"
_FRAMING = struct.Struct("<BQ")


class NotARecording(ValueError):
    """The file is not MCAP at all (wrong or missing magic)."""


@dataclass(frozen=True)
class RecordedFrame:
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
    summary: bool = False  # the footer was reached: the recorder closed the file
    unreadable_tail: int = 0  # bytes at the end no record could be read from
    tail_inside: str = ""  # the kind of record the file ends inside
    orphan_frames: int = 0  # frames whose channel record was lost with a bad chunk

    @property
    def complete(self) -> bool:
        return self.summary and not self.bad_chunks and not self.unreadable_tail

    def describe(self) -> list[str]:
        lines = []
        for offset, why in self.bad_chunks:
            lines.append(f"bad chunk at byte {offset} skipped: {why}")
        if self.tail_inside == "summary":
            lines.append(f"summary section cut short ({self.unreadable_tail} bytes); every frame was read")
        elif self.unreadable_tail:
            where = f"inside a {self.tail_inside} record" if self.tail_inside else "mid-record"
            lines.append(f"file ends {where}: {self.unreadable_tail} bytes unreadable")
        if not self.summary and self.tail_inside != "summary":
            lines.append("no summary section (recorder killed, or the file is still being written)")
        if self.orphan_frames:
            lines.append(f"{self.orphan_frames} frames whose channel was defined in a lost chunk")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "frames": self.frames,
            "chunks": self.chunks,
            "bad_chunks": [{"offset": o, "error": w} for o, w in self.bad_chunks],
            "summary": self.summary,
            "unreadable_tail": self.unreadable_tail,
            "tail_inside": self.tail_inside,
            "orphan_frames": self.orphan_frames,
            "complete": self.complete,
        }


def _opname(op: int) -> str:
    try:
        return Opcode(op).name.lower().replace("_", " ")
    except ValueError:
        return f"unknown (opcode {op:#x})"


class RecordingReader:
    """Iterate over the frames of ``path`` in file order; ``report`` is final once iteration ends."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.report = RecordingReport()
        self._channels: dict[int, Channel] = {}

    def __iter__(self) -> Iterator[RecordedFrame]:
        rep = self.report
        with open(self.path, "rb") as f:
            rep.size = os.fstat(f.fileno()).st_size
            if f.read(len(MAGIC)) != MAGIC:
                raise NotARecording(f"{self.path}: not an MCAP file (bad magic)")
            offset = len(MAGIC)
            while offset < rep.size:
                head = f.read(_FRAMING.size)
                if len(head) < _FRAMING.size:
                    rep.unreadable_tail = rep.size - offset
                    break
                op, length = _FRAMING.unpack(head)
                # a length past the end is a cut-off record or a corrupt length: the rest is lost either way
                if offset + _FRAMING.size + length > rep.size:
                    rep.unreadable_tail = rep.size - offset
                    rep.tail_inside = _opname(op)
                    break
                if op == Opcode.FOOTER or op == Opcode.DATA_END:
                    # what follows repeats what we read; a closing magic says it was written whole
                    f.seek(rep.size - len(MAGIC))
                    rep.summary = f.read(len(MAGIC)) == MAGIC
                    if not rep.summary:
                        rep.unreadable_tail = rep.size - offset
                        rep.tail_inside = "summary"
                    break
                body = f.read(length) if op in (Opcode.CHUNK, Opcode.CHANNEL, Opcode.MESSAGE) else None
                if body is None:
                    f.seek(length, os.SEEK_CUR)
                elif op == Opcode.CHUNK:
                    rep.chunks += 1
                    yield from self._chunk(offset, body)
                else:
                    yield from self._records([self._parse(op, body)])
                offset += _FRAMING.size + length

    @staticmethod
    def _parse(op: int, body: bytes) -> Any:
        stream = ReadDataStream(BytesIO(body))
        return Channel.read(stream) if op == Opcode.CHANNEL else Message.read(stream, len(body))

    def _chunk(self, offset: int, body: bytes) -> Iterator[RecordedFrame]:
        try:
            records = breakup_chunk(Chunk.read(ReadDataStream(BytesIO(body))), validate_crc=True)
        except Exception as exc:  # zstd, CRC and struct errors share no base class
            self.report.bad_chunks.append((offset, f"{type(exc).__name__}: {exc}"[:200]))
            return
        yield from self._records(records)

    def _records(self, records: list[Any]) -> Iterator[RecordedFrame]:
        for rec in records:
            if isinstance(rec, Channel):
                self._channels[rec.id] = rec
            elif isinstance(rec, Message):
                ch = self._channels.get(rec.channel_id)
                self.report.frames += 1
                if ch is None:
                    self.report.orphan_frames += 1
                topic = ch.topic if ch else f"channel {rec.channel_id} (definition lost)"
                endpoint = ch.metadata.get("endpoint", "") if ch else ""
                yield RecordedFrame(rec.log_time, rec.publish_time, topic, endpoint, bytes(rec.data))


def read_recording(path: str) -> RecordingReader:
    """The frames of a recording, in file order (iterate it); its ``report`` says what was lost."""
    return RecordingReader(path)
