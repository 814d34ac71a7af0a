"""What the commands that read a recording share: every way a file fails to be one, as one line,
and how its times are written."""

from __future__ import annotations

from datetime import datetime, timezone

from eagle3_top.tracer.reader.recording import NotARecording, UnsupportedRecording

# Missing, unreadable, a directory, not MCAP, of a newer stream version: exit 2, one line.
READ_ERRORS = (OSError, NotARecording, UnsupportedRecording)


def read_error(path: str, exc: BaseException) -> str:
    """The one line for an exception in ``READ_ERRORS`` (the reader's own messages name the file)."""
    if isinstance(exc, OSError):
        return f"{path}: {exc.strerror or exc}"
    return str(exc)


def iso(ns: int) -> str:
    """A log time as UTC, to the millisecond: ``2025-01-31T12:00:00.123Z``."""
    try:
        t = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):  # a hostile time past the year 9999
        return f"{ns} ns"
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
