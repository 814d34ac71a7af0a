"""Recordings of the event stream: every frame as received, in an MCAP file (docs/recording.md).

Reader side only: the serving process never imports this package (pyproject's import contracts)."""

from .reader import RecordedFrame, RecordingReader, RecordingReport, read_recording
from .writer import FLUSH_INTERVAL_S, SCHEMA_NAME, UNDECODABLE, RecordingWriter

__all__ = [
    "FLUSH_INTERVAL_S",
    "SCHEMA_NAME",
    "UNDECODABLE",
    "RecordedFrame",
    "RecordingReader",
    "RecordingReport",
    "RecordingWriter",
    "read_recording",
]
