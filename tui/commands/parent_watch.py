"""A monitor that ``serve-web`` started for a browser tab ends when that server dies: a server killed
outright sends no quit, and Textual's web driver takes the end of its input for no reason to stop,
so the monitor would run on with no one to see it."""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 1.0
GRACE_S = 3.0  # for the app's own exit (a recording in progress is closed), then none


def exit_with_parent() -> None:
    """Watch the parent from a daemon thread; once it is gone, SIGTERM ourselves (the web driver
    turns it into the app's exit), and leave for good after a grace period."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:  # an orphan is adopted by init or a subreaper
            time.sleep(POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="eagle3-top-parent-watch", daemon=True).start()
