"""Recordings of the event stream: every frame as received, in an MCAP file (docs/recording.md).

Reader side only: the serving process never imports this package (pyproject's import contracts)."""

from eagle3_top.tracer.reader.recording.gaps import SeqGaps
from eagle3_top.tracer.reader.recording.reader import (
    NotARecording,
    RecordedFrame,
    RecordingReader,
    RecordingReport,
    UnsupportedRecording,
    read_recording,
)
from eagle3_top.tracer.reader.recording.writer import (
    FLUSH_INTERVAL_S,
    SCHEMA_NAME,
    UNDECODABLE,
    RecordingBusy,
    RecordingWriter,
)

__all__ = [
    "FLUSH_INTERVAL_S",
    "SCHEMA_NAME",
    "UNDECODABLE",
    "NotARecording",
    "RecordedFrame",
    "RecordingReader",
    "RecordingReport",
    "RecordingBusy",
    "RecordingWriter",
    "SeqGaps",
    "UnsupportedRecording",
    "read_recording",
]
