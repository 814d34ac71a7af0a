"""The publisher a serving process uses when its sender runs in a sidecar process.

A ``Publisher`` keeps a sender thread in the serving process; its Python (resolving steps,
encoding, every ``send``) shares the GIL with the scheduler, which cost 8 – 11 % of a scheduler's
iterations on an H100 host. ``RingPublisher`` has the same interface for the ``Tracer`` but no
thread on the hot path: a step whose host copies have landed is written into a shared-memory ring
as a fixed-layout record (``step_record``: a few ``memcpy``s), and a sidecar process
(``sidecar.py``, started here, ending with this process) resolves, encodes and publishes it on the
XPUB socket. The stream on the wire is the same. When the ring is full the step is dropped and
counted, and the sidecar leaves its sequence number out, as a full queue does in-process.

What is not a ready step (an aux fingerprint, whose Triton launches and wait take hundreds of
microseconds; a probe's rows; a step whose copies are still in flight on an engine that gives us
no event of its own) goes to one aux thread that sleeps until there is such work, a few times a
second at most.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgpack
from eagle3_top.tracer.schema import Hello, SourceId
from eagle3_top.tracer.serving.deferred import Deferred, wait_event
from eagle3_top.tracer.serving.pending import DeferredStep
from eagle3_top.tracer.serving.publisher import EndpointError, TracerState, check_bind_endpoint
from eagle3_top.tracer.serving.ring import (
    CLOSE_RECORD,
    EVENT_RECORD,
    HELLO_RECORD,
    STATE_RECORD,
    STEP_RECORD,
    Ring,
    payload_size,
)
from eagle3_top.tracer.serving.step_record import step_parts, step_record

if TYPE_CHECKING:
    from eagle3_top.tracer.transport.curve import CurveServer

log = logging.getLogger("eagle3_top.publisher")

DEFAULT_RING_BYTES = 64 << 20  # ~3,000 steps of batch 64 × 16 with int64 columns; probes fit
START_TIMEOUT_S = 60.0  # the sidecar imports numpy, zmq and msgpack, then binds
AUX_WAIT_S = 2.0  # how long the aux thread waits for ring space before it drops an aux or probe
CHECK_SIDECAR_S = 1.0
# Ready steps are written in batches: the serving thread's Python runs cold between verify steps
# (its caches are the scheduler's), and writing one step's record cost 35 - 60 µs so on a 2-core
# box against ~10 µs for each of several in a row. A step waits at most this many steps or
# seconds; an idle server's last steps are written by the aux thread.
BATCH_STEPS = 8
BATCH_AGE_S = 0.05
AUX_TICK_S = 0.1  # the aux thread's look at steps held by a server gone quiet


class SidecarError(RuntimeError):
    """The sidecar could not start (one line); the caller may fall back to an in-process sender."""


class RingPublisher(TracerState):
    """``Publisher``'s interface for the ``Tracer``, its sender in a sidecar process."""

    def __init__(
        self,
        endpoint: str,
        source: SourceId,
        *,
        allow_remote: bool = False,
        curve: CurveServer | None = None,
        ring_bytes: int = DEFAULT_RING_BYTES,
        hello_interval_s: float = 5.0,
        health_interval_s: float = 1.0,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        check_bind_endpoint(endpoint, allow_remote)
        self.ring = Ring.create(ring_bytes)  # before TracerState: its fields write into the ring
        super().__init__()
        self.ring.set_started(self.started)
        self.endpoint, self.source, self.src = endpoint, source, source.key
        self.hello: Hello | None = None
        self._state_n = 0
        self._aux: queue.SimpleQueue[tuple[str, float, Deferred] | None] = queue.SimpleQueue()
        self._aux_thread: threading.Thread | None = None
        self._aux_steps = 0  # steps handed to the aux thread and not yet written: later ones wait
        self._aux_lock = threading.Lock()
        self._held: list[tuple[DeferredStep, float]] = []  # ready steps not yet written
        self._held_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one batch at a time: records stay in step order
        self._dead = False
        self._next_check = 0.0
        self._closed = False
        self._proc, self._life = self._spawn(
            endpoint, source, allow_remote, curve, hello_interval_s, health_interval_s, start_timeout_s
        )

    # -- the sidecar's life ----------------------------------------------------------------------

    def _spawn(
        self,
        endpoint: str,
        source: SourceId,
        allow_remote: bool,
        curve: CurveServer | None,
        hello_interval_s: float,
        health_interval_s: float,
        timeout: float,
    ) -> tuple[subprocess.Popen[bytes], int]:
        # the sidecar sees EOF on this pipe when this process is gone, however it went
        life_r, life_w = os.pipe()
        cmd = [
            sys.executable,
            "-m",
            "eagle3_top.tracer.serving.sidecar",
            "--ring-fd",
            str(self.ring.fd),
            "--life-fd",
            str(life_r),
            "--endpoint",
            endpoint,
            "--source",
            msgpack.packb([source.host, source.pid, source.rank, source.engine]).hex(),
            "--hello-interval",
            str(hello_interval_s),
            "--health-interval",
            str(health_interval_s),
        ]
        if allow_remote:
            cmd.append("--allow-remote")
        try:
            proc = subprocess.Popen(
                cmd, pass_fds=(self.ring.fd, life_r), stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        except OSError as exc:
            os.close(life_r)
            os.close(life_w)
            self.ring.close()
            raise SidecarError(f"cannot start the sidecar: {exc}") from exc
        os.close(life_r)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            # the CURVE secret goes through a pipe, never the command line
            secret = None
            if curve is not None:
                secret = [
                    curve.secret,
                    sorted(curve.admitted) if curve.admitted is not None else None,
                    curve.clients_dir,
                ]
            proc.stdin.write(msgpack.packb(secret, use_bin_type=True))
            proc.stdin.close()
        except OSError:
            pass
        line = b""
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if ready:
            line = proc.stdout.readline()
        proc.stdout.close()
        word, _, rest = line.decode("utf-8", "replace").strip().partition(" ")
        if word != "ready":
            proc.kill()
            proc.wait()
            os.close(life_w)
            self.ring.close()
            if word == "bind":
                raise EndpointError(rest)
            raise SidecarError(
                rest or f"the sidecar said nothing in {timeout:.0f} s (exit {proc.returncode})"
            )
        self.bound_endpoint = rest
        return proc, life_w

    def _sidecar_alive(self) -> bool:
        now = time.monotonic()
        if now < self._next_check:
            return not self._dead
        self._next_check = now + CHECK_SIDECAR_S
        if not self._dead and self._proc.poll() is not None:
            self._dead = True
            self.disabled = True
            log.error(
                "eagle3-top: the tracer's sidecar (pid %d) exited with %s; nothing more is published, "
                "the server is unaffected",
                self._proc.pid,
                self._proc.returncode,
            )
        return not self._dead

    # -- TracerState's counters, written through to the ring for the sidecar's health events ----

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _MIRRORED:
            self.ring.set_field(name, value)
        elif name == "last_error" and value is not None:
            self._state(now=False)  # engine_error is sent by the wake() that follows it

    def _state(self, now: bool) -> None:
        self._state_n += 1
        body = {
            "n": self._state_n,
            "last_error": self.last_error,
            "engine_error": self.engine_error,
            "now": now,
        }
        self.ring.try_write(STATE_RECORD, [msgpack.packb(body)])

    def wake(self) -> None:
        self._state(now=True)

    @property
    def dropped(self) -> int:
        return self.ring.dropped

    # -- caller side (serving loop) ----------------------------------------------------------------

    def publish(self, kind: str, body: Mapping[str, Any] | Deferred, ts: float | None = None) -> bool:
        """Write one event into the ring, or hand it to the aux thread; False when it was dropped."""
        if not self._sidecar_alive() or self._closed:
            self.ring.count_dropped()
            return False
        ts = time.time() if ts is None else ts
        if isinstance(body, DeferredStep):
            if self._aux_steps == 0 and body.ready():
                with self._held_lock:
                    held = self._held
                    held.append((body, ts))
                    due = len(held) >= BATCH_STEPS or ts - held[0][1] >= BATCH_AGE_S
                if due:
                    self._write_held()
                elif self._aux_thread is None:
                    self._start_aux()  # it writes what a server gone quiet leaves held
                return True
            self._write_held()  # what is held goes first: records stay in step order
            with self._aux_lock:
                self._aux_steps += 1
            return self._to_aux(kind, ts, body)
        if isinstance(body, Deferred):
            return self._to_aux(kind, ts, body)
        return self.ring.write(EVENT_RECORD, [msgpack.packb([kind, ts, body], use_bin_type=True)])

    def _write_held(self) -> None:
        """Write the held steps' records, oldest first; a step that cannot be read is lost and
        counted, never the batch."""
        with self._write_lock:
            with self._held_lock:
                held, self._held = self._held, []
            for step, ts in held:
                try:
                    self.ring.write_with(STEP_RECORD, *step_record(step, ts))
                except Exception as exc:
                    self.ring.count_dropped()
                    self.last_error = f"step: {type(exc).__name__}: {exc}"[:300]
                finally:
                    step.release()

    def set_hello(self, hello: Hello) -> None:
        self.hello = hello
        if not self.ring.write(HELLO_RECORD, [msgpack.packb(hello.to_body(), use_bin_type=True)]):
            log.warning("eagle3-top: the hello did not fit the tracer's ring")

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the sidecar to publish what is written, a due health event
        included; only for a process about to die, never on the serving path."""
        deadline = time.monotonic() + timeout
        self._write_held()
        while time.monotonic() < deadline and self._proc.poll() is None:
            if self._aux_steps == 0 and self._aux.empty() and self.ring.pending_bytes() == 0:
                if self.ring.state_acked >= self._state_n:
                    return True
            time.sleep(0.005)
        return False

    def close(self, timeout: float = 2.0) -> None:
        """Let the sidecar publish what is written, send its final health event and exit."""
        if self._closed:
            return
        self.flush(timeout)
        self._closed = True
        if self._aux_thread is not None:
            self._aux.put(None)
        self.ring.try_write(CLOSE_RECORD, [b""])
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
        try:
            os.close(self._life)
        except OSError:
            pass

    # -- the aux thread ----------------------------------------------------------------------------

    def _start_aux(self) -> None:
        with self._aux_lock:
            if self._aux_thread is None:
                self._aux_thread = threading.Thread(target=self._aux_run, name="eagle3-top-aux", daemon=True)
                self._aux_thread.start()

    def _to_aux(self, kind: str, ts: float, body: Deferred) -> bool:
        self._start_aux()
        self._aux.put((kind, ts, body))
        return True

    def _aux_run(self) -> None:
        while True:
            try:
                item = self._aux.get(timeout=AUX_TICK_S)
            except queue.Empty:
                held = self._held
                if held and time.time() - held[0][1] >= BATCH_AGE_S:
                    self._write_held()
                continue
            if item is None:
                return
            kind, ts, body = item
            try:
                if isinstance(body, DeferredStep):
                    self._aux_step(body, ts)
                else:
                    fields = body.resolve()
                    self._write_waiting(EVENT_RECORD, [msgpack.packb([kind, ts, fields], use_bin_type=True)])
            except Exception as exc:  # one event lost, never the thread
                self.ring.count_dropped()
                self.last_error = f"{kind}: {type(exc).__name__}: {exc}"[:300]

    def _aux_step(self, step: DeferredStep, ts: float) -> None:
        try:
            while not step.ready():  # copies still in flight: wait off the serving thread
                if step.late:
                    raise RuntimeError("a step published before its accept lengths were supplied")
                wait_event(_Ready(step))
            try:
                self._write_waiting(STEP_RECORD, step_parts(step, ts))
            finally:
                step.release()
        finally:
            with self._aux_lock:
                self._aux_steps -= 1

    def _write_waiting(self, kind: int, parts: list[Any]) -> None:
        """Write from the aux thread, waiting for room (up to ``AUX_WAIT_S``) rather than drop."""
        size = payload_size(parts)
        if not self.ring.fits(size):
            self.ring.count_dropped()
            raise ValueError(
                f"{size / 1e6:.1f} MB does not fit the tracer's ring ({self.ring.capacity / 1e6:.0f} MB; "
                "EAGLE3_TOP_RING_MB sets it)"
            )
        deadline = time.monotonic() + AUX_WAIT_S
        while not self.ring.try_write(kind, parts):
            if time.monotonic() > deadline or self._dead:
                self.ring.count_dropped()
                return
            time.sleep(0.005)


_MIRRORED = frozenset(("hook_errors", "discarded_rows", "paused", "disabled"))


class _Ready:
    """``wait_event``'s view of a step: polled until its copies have landed."""

    __slots__ = ("step",)

    def __init__(self, step: DeferredStep) -> None:
        self.step = step

    def query(self) -> bool:
        return self.step.ready()
