"""The relay's ``--record``: a thread that writes what the proxy's capture socket copies into a
recording (``RecordingWriter``), never in the proxy's way.

The capture socket is an inproc PUB with a bounded high-water mark: when this thread falls behind
(a slow disk), the PUB drops the copies past the mark and the proxy forwards on. The frames lost
that way are the proxy's count minus ``frames`` (``not_recorded``), exact once the relay stopped;
``stop`` is handed that count and writes it into the recording (its recorder metadata), so that
``recording info`` says it too. A write error ends the recording, not the relay: what was written
stays readable.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

import zmq
from eagle3_top.tracer.reader.recording import RecordingWriter, SeqGaps

BATCH = 4096  # frames taken per wake-up: the writer's tick runs at least this often
# Where cores are short, the scheduler gives the proxy's threads the CPU before this one: a nice
# of 10 weighs a tenth of a normal thread, so under a flood the recorder misses frames (counted)
# instead of slowing the forwarding (benchmarks/bench_relay.py).
NICE = 10


class CaptureRecorder:
    def __init__(
        self, context: zmq.Context, capture_endpoint: str, writer: RecordingWriter, label: str, hwm: int
    ) -> None:
        self.writer = writer
        self.label = label  # the recording's endpoint: one socket carries every upstream's frames
        self.frames = 0
        self.bytes = 0
        self.gaps = SeqGaps()
        self.error: str | None = None
        self._forwarded: int | None = None  # the relay's final count, once it stopped
        self._stop = threading.Event()
        # connected before the proxy starts: an inproc PUB sends only to those already there
        self._sock = context.socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, hwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.connect(capture_endpoint)
        self._thread = threading.Thread(target=self._run, name="eagle3-top-relay-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def not_recorded(self, forwarded: int) -> int:
        """Of ``forwarded`` frames (the proxy's count), those not recorded: dropped at the capture
        socket's mark, or, while the relay runs, still on their way to this thread."""
        return max(0, forwarded - self.frames)

    def _take(self, everything: bool = False) -> None:
        sock, writer, label, gaps = self._sock, self.writer, self.label, self.gaps
        n = nbytes = 0
        recv_ns = time.time_ns()  # one receive time a batch: all were queued when poll returned
        try:
            while everything or n < BATCH:
                frame = sock.recv(zmq.NOBLOCK)
                env = writer.add(frame, label, recv_ns)
                if env is not None:
                    gaps.see(label, env)
                n += 1
                nbytes += len(frame)
        except zmq.Again:
            pass
        finally:
            self.frames += n
            self.bytes += nbytes

    def _run(self) -> None:
        if sys.platform.startswith("linux"):  # a thread's own id: elsewhere it would be the process
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        try:
            while not self._stop.is_set():
                if self._sock.poll(100):
                    self._take()
                self.writer.tick()
            self._take(everything=True)  # what the proxy copied before it stopped
        except OSError as exc:  # a full disk: forwarding goes on, the file keeps its closed chunks
            self.error = f"recording stopped: {exc.strerror or exc} ({self.frames} frames kept)"
        finally:
            try:
                self._close_writer()
            except OSError as exc:
                self.error = self.error or f"cannot finish the recording: {exc.strerror or exc}"
            self._sock.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _close_writer(self) -> None:
        """The summary, with the frames forwarded and not written when the relay's count is known
        (a write error ends this thread while the relay runs on: then it is not)."""
        forwarded = self._forwarded
        missing = self.not_recorded(forwarded) if forwarded is not None else None
        self.writer.close(not_written=missing, missed=self.gaps.missed)

    def stop(self, forwarded: int | None = None, timeout: float = 10.0) -> None:
        """Once the relay has stopped (``forwarded``: its final count): take what is queued, write
        the summary and the frames not recorded, close the file."""
        self._forwarded = forwarded
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        elif not self.writer.closed:  # never started
            self._close_writer()
            self._sock.close()
