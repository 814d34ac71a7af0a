"""The clean stop of a long-running command (``record``, ``relay``, ``export``): SIGTERM (a
service manager's stop) or SIGINT (Ctrl-C), after which the command closes what it writes whole.

SIGINT is handled here, not left to Python's KeyboardInterrupt: a shell that starts a command in
the background starts it with SIGINT ignored, Python keeps that, and such a job would then only
stop on SIGTERM; and a KeyboardInterrupt raised mid-write could leave a recording without its
footer."""

from __future__ import annotations

import signal
import threading
from types import FrameType


class StopSignal:
    """Installs itself for SIGTERM and SIGINT; ``signum`` is the first one that came, or None."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._event = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        self._event.set()

    @property
    def stopped(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        """``signal SIGTERM``, for the line that says why the command ended."""
        return f"signal {signal.Signals(self.signum).name}" if self.signum is not None else "no signal"

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True as soon as a stop signal came."""
        return self._event.wait(timeout)
