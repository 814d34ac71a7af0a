"""The built-in engine as a child process behind its HTTP front (``eagle3-top toy --http``), as the
probe and real-server rehearsal tests start it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request

from patience import HANG_GUARD_S

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


class Toy:
    """The built-in engine behind its HTTP front, on ports the child binds itself (port 0 / ``*``):
    picking free ports here and handing them over races with every connection made meanwhile."""

    def __init__(self, *args: str) -> None:
        self.url = self.endpoint = ""
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*CLI, "toy", "--http", "0", "--publish", "tcp://127.0.0.1:*", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())
            if "publishing on " in line:
                self.endpoint = line.split("publishing on ", 1)[1].strip()
            if "serving /generate on " in line:
                self.url = line.split("serving /generate on ", 1)[1].strip()

    def wait_ready(self, timeout: float = HANG_GUARD_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "\n".join(self.lines)
            if self.url and self.endpoint:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    assert r.status == 200
                return
            time.sleep(0.1)
        raise AssertionError("toy HTTP front did not come up:\n" + "\n".join(self.lines))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
