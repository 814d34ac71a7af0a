"""A recording written into a FIFO: a disk the test can stall and set flowing again.

While paused nobody reads the pipe, so a writer blocks as soon as it writes more than the pipe
holds (its next chunk); flowing, every byte read is appended to a regular file (``copy``) that
``RecordingReader.read_available`` can follow as the recorder writes."""

from __future__ import annotations

import fcntl
import os
import sys
import termios
import threading
import time

from patience import PATIENCE_S

F_GETPIPE_SZ = 1032  # Linux


def pipe_half_full(fd: int) -> bool:
    """Half of what the pipe holds is waiting: a writer of more than that will block."""
    capacity = fcntl.fcntl(fd, F_GETPIPE_SZ)
    queued = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, queued)
    return int.from_bytes(queued, sys.byteorder) > capacity // 2


class FifoSink:
    def __init__(self, fifo: str, copy: str) -> None:
        os.mkfifo(fifo)
        # a reader first, so that the writer's open returns
        self.fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.copy = copy
        open(copy, "wb").close()
        self._flowing = threading.Event()
        self._flowing.set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def full(self) -> bool:
        return pipe_half_full(self.fd)

    def _read(self) -> None:
        seen_data = False  # before the writer opens, a read says end of file too
        with open(self.copy, "ab") as out:
            while True:
                self._flowing.wait()
                try:
                    chunk = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                if not chunk:
                    if seen_data:
                        break  # the writer closed the file
                    time.sleep(0.01)
                    continue
                seen_data = True
                out.write(chunk)
                out.flush()
        self._done.set()

    def finish(self, timeout: float = PATIENCE_S) -> None:
        """Read until the writer has closed the file."""
        self.resume()
        assert self._done.wait(timeout), "the writer never closed the file"
        os.close(self.fd)
