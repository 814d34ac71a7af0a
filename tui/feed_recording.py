"""The live monitor's ``r``: record what the monitor receives, into the same MCAP format as
``eagle3-top record``.

The UI thread only asks (``start``/``stop``); the feed's worker opens, writes and closes the file,
so the writer is used by one thread and a slow disk never stalls the screen. A write error (a full
disk) ends the recording with one line in the status bar; what was closed before stays readable.
"""

from __future__ import annotations

import os
import threading
import time

from eagle3_top.tracer.reader.recording import RecordingWriter


def default_name(directory: str = ".") -> str:
    return os.path.join(directory, time.strftime("eagle3-top-%Y%m%d-%H%M%S.mcap"))


class FeedRecording:
    def __init__(self, endpoints: list[str]) -> None:
        # One socket serves every endpoint of the monitor, so a frame's own endpoint is unknown.
        self._endpoint = ",".join(endpoints)
        self._lock = threading.Lock()
        self._want: str | None = None  # a path to start recording to
        self._want_stop = False
        self._writer: RecordingWriter | None = None
        self.path: str | None = None  # the file being written, for the status bar
        self.frames = 0
        self.error: str | None = None
        self.last_closed: str | None = None  # the file most recently finished, and its frames
        # What became of each start asked for: (True, path) once the file is open, (False, why) when
        # it could not be; the UI tells the user from these, not from having asked.
        self._outcomes: list[tuple[bool, str]] = []

    @property
    def active(self) -> bool:
        return self.path is not None

    # -- the UI thread -----------------------------------------------------------------------

    def start(self, path: str) -> str | None:
        """Ask the worker to record into ``path``; the reason it cannot, or None (``outcomes``
        then says whether the worker could open it)."""
        directory = os.path.dirname(path) or "."
        why = None
        if not os.path.isdir(directory):
            why = f"cannot record to {directory}: " + (
                "not a directory" if os.path.exists(directory) else "no such directory"
            )
        elif os.path.exists(path):
            why = f"cannot record to {path}: it exists"
        if why is not None:
            self.error = why  # the status bar says the same as the answer to the key
            return why
        with self._lock:
            self._want, self._want_stop = path, False
        return None

    def outcomes(self) -> list[tuple[bool, str]]:
        """The starts the worker carried out or refused since the last call, oldest first."""
        with self._lock:
            out, self._outcomes = self._outcomes, []
        return out

    def stop(self) -> None:
        with self._lock:
            self._want_stop, self._want = True, None

    # -- the worker --------------------------------------------------------------------------

    def service(self) -> None:
        """Apply a start or stop the UI asked for; close the chunk in progress once a second."""
        with self._lock:
            want, stop = self._want, self._want_stop
            self._want, self._want_stop = None, False
        if stop:
            self._close()
        if want is not None:
            self._close()
            try:
                self._writer = RecordingWriter(want, exclusive=True)
            except OSError as exc:
                self.error = f"cannot record to {want}: {exc.strerror or exc}"
                with self._lock:
                    self._outcomes.append((False, self.error))
                return
            self.path, self.frames, self.error = want, 0, None
            with self._lock:
                self._outcomes.append((True, want))
        if self._writer is not None:
            try:
                self._writer.tick()
            except OSError as exc:
                self._failed(exc)

    def add(self, frames: list[bytes], recv_ns: int) -> None:
        writer = self._writer
        if writer is None:
            return
        try:
            for frame in frames:
                writer.add(frame, self._endpoint, recv_ns)
        except OSError as exc:
            self._failed(exc)
            return
        self.frames += len(frames)

    def _failed(self, exc: OSError) -> None:
        self.error = f"recording to {self.path} stopped: {exc.strerror or exc} ({self.frames} frames kept)"
        self._close()

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except OSError as exc:
            self.error = self.error or f"cannot finish {self.path}: {exc.strerror or exc}"
        self.last_closed = f"{self.path} ({self.frames} frames)"
        self.path = None

    def close(self) -> None:
        self._close()
