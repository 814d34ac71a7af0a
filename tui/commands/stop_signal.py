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
from typing import Any


class StopSignal:
    """Installs itself for SIGTERM and SIGINT; ``signum`` is the first one that came, or None.
    As a context manager it puts the handlers it replaced back at the end of the block. Off the
    main thread, where Python takes no signals, it installs nothing and only ``wait`` sleeps."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._event = threading.Event()
        self._before: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._before[signum] = signal.signal(signum, self._on_signal)

    def __enter__(self) -> StopSignal:
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)

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
