"""Non-blocking event publisher: bounded queue, one sender thread that owns the PUB socket.

The serving loop only appends to a deque (a few hundred nanoseconds, no lock, no syscall). The
sender thread resolves deferred bodies (device tensors copied to the host, cut into columns),
encodes and sends. When the queue is full the event is dropped and counted; the sequence number is still
consumed, so a subscriber sees the gap and counts it as missed.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import zmq
from eagle3_top.tracer.schema import HEALTH, HELLO, Health, Hello, SourceId, encode
from eagle3_top.tracer.serving.deferred import Deferred

if TYPE_CHECKING:
    from eagle3_top.tracer.transport.curve import Admission, CurveServer

log = logging.getLogger("eagle3_top.publisher")

DEFAULT_QUEUE = 4096
DEFAULT_SNDHWM = 10_000
# Worst-case latency the sender adds, and its wake-up rate. Each wake-up is a stretch of Python
# that wants the GIL while the scheduler's thread does, and every GIL hand-over costs the serving
# thread: on the H100 host a scheduler-like loop kept 0.887 of its rate waking every 20 ms and
# 0.919 every 100 ms (benchmarks/bench_serving_path.py). A monitor repaints once a second.
FLUSH_INTERVAL_S = 0.1


class EndpointError(ValueError):
    pass


def reachable_from_elsewhere(endpoint: str) -> bool:
    """A TCP endpoint bound to anything but a loopback address (a wildcard, an interface, a name)."""
    transport, _, rest = endpoint.partition("://")
    if transport != "tcp":
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def check_bind_endpoint(endpoint: str, allow_remote: bool = False) -> None:
    """Refuse to bind a TCP endpoint reachable from other hosts unless asked to."""
    if "://" not in endpoint:
        raise EndpointError(f"{endpoint!r} is not a ZeroMQ endpoint (expected tcp://HOST:PORT or ipc://PATH)")
    transport, rest = endpoint.split("://", 1)
    if transport == "tcp":
        port = rest.rsplit(":", 1)[-1] if ":" in rest else ""
        # libzmq takes the port modulo 2^16 (99999 binds 34463): say so instead of binding elsewhere
        if port != "*" and not (port.isdigit() and int(port) <= 65535):
            raise EndpointError(
                f"{endpoint!r}: port {port or '(none)'} is not 0-65535 (0 or * picks a free one)"
            )
    if allow_remote or not reachable_from_elsewhere(endpoint):
        return
    raise EndpointError(
        f"refusing to bind {endpoint}: not a loopback address; pass allow_remote "
        "(--allow-remote) and prefer CURVE or an SSH tunnel (docs/protocol.md)"
    )


class TracerState:
    """What the tracer's hooks report through a publisher (health events carry it)."""

    def __init__(self) -> None:
        self.hook_errors = 0
        self.discarded_rows = 0  # step rows the engine threw away and the tracer left out
        self.paused = False  # the tracer is paused (its pause file exists): nothing is recorded
        self.disabled: bool = False
        self.last_error: str | None = None
        self.engine_error: str | None = None  # the engine itself failed: it is not serving
        self.started = time.time()  # tells a subscriber a restart under the same source id
        self._final = False
        self._health_now = False

    def engine_failed(self, why: str) -> None:
        """The engine's own forward raised: say so on the next health event (sent at once)."""
        self.engine_error = why[:300]
        self.wake()

    def wake(self) -> None:
        """Send what is due now (no-op without a sender)."""

    def count_hook_error(self, exc: BaseException) -> None:
        self.hook_errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]


class Publisher(TracerState):
    """Publishes events from one source. ``publish`` never blocks and never raises."""

    def __init__(
        self,
        endpoint: str,
        source: SourceId,
        *,
        queue_size: int = DEFAULT_QUEUE,
        sndhwm: int = DEFAULT_SNDHWM,
        allow_remote: bool = False,
        curve: CurveServer | None = None,
        hello_interval_s: float = 5.0,
        health_interval_s: float = 1.0,
        context: zmq.Context | None = None,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        check_bind_endpoint(endpoint, allow_remote)
        super().__init__()
        self.endpoint = endpoint
        self.source = source
        self.src = source.key
        self.queue_size = queue_size
        self.flush_interval_s = flush_interval_s
        self.sent = 0
        self.dropped = 0
        self.subscriptions = 0  # subscribe messages seen: frames sent after one reach that subscriber
        self.encode_errors = 0
        # itertools.count: next() is atomic under the GIL, so the caller and the sender thread
        # can both take numbers without a lock.
        self._seq = itertools.count()
        self._queue: deque[tuple[str, int, float, Mapping[str, Any] | Deferred]] = deque()
        self._wake = threading.Event()
        self._idle = False
        self._wake_depth = max(1, queue_size // 4)
        self._stop = False
        self.hello: Hello | None = None  # the latest, repeated every hello_interval_s
        self._hello: Mapping[str, Any] | None = None
        self._hello_interval = hello_interval_s
        self._health_interval = health_interval_s
        self._ctx = context or zmq.Context.instance()
        # XPUB behaves as PUB for subscribers, and tells us when one subscribes: a late joiner
        # gets the hello at once instead of waiting for the periodic one.
        sock = self._ctx.socket(zmq.XPUB)
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        sock.setsockopt(zmq.SNDHWM, sndhwm)
        sock.setsockopt(zmq.LINGER, 200)
        # CURVE only from a ``curve.server_config`` result: a secret alone would admit anyone.
        self.admission: Admission | None = None
        self._monitor: zmq.Socket | None = None
        try:
            if curve is not None:
                from eagle3_top.tracer.transport.curve import serve

                self.admission = serve(self._ctx, sock, curve, endpoint)
                # ZAP sees only the clients that get as far as a key; plain-text clients and wrong
                # server keys fail before it, and only the socket's monitor tells.
                self._monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
            sock.bind(endpoint)  # bind errors surface here, in the caller, once
        except Exception:
            self._close_curve(sock)
            sock.close(0)
            raise
        self.bound_endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if curve is None and reachable_from_elsewhere(endpoint):
            # allowed (allow_remote), but anyone who reaches the port reads the stream: say so, once
            log.warning(
                "eagle3-top publisher %s: reachable from other hosts and not encrypted: anyone who can "
                "reach the port reads the stream; give it a CURVE secret (--curve-secret, "
                "EAGLE3_TOP_CURVE_SECRET) or bind 127.0.0.1 behind an SSH tunnel",
                endpoint,
            )
        if self.admission is not None:
            self.admission.label = self.bound_endpoint
        self._sock: zmq.Socket | None = sock
        self._thread = threading.Thread(target=self._run, name="eagle3-top-publisher", daemon=True)
        self._thread.start()

    # -- caller side (serving loop) -------------------------------------------------------------

    def publish(self, kind: str, body: Mapping[str, Any] | Deferred, ts: float | None = None) -> bool:
        """Queue one event (``ts``: when it happened, now by default); False when it was dropped
        because the queue is full."""
        seq = next(self._seq)
        if len(self._queue) >= self.queue_size or self._stop:
            self.dropped += 1
            return False
        self._queue.append((kind, seq, time.time() if ts is None else ts, body))
        # The sender wakes on its own every flush_interval_s; waking it per event would hand the
        # GIL back and forth once per verify step. Only a filling queue calls it early.
        if self._idle and len(self._queue) >= self._wake_depth:
            self._wake.set()
        return True

    def wake(self) -> None:
        self._health_now = True
        self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the queue and a due health event to go out; only for a
        process about to die, never on the serving path."""
        deadline = time.monotonic() + timeout
        while (self._queue or self._health_now) and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.005)
        return not (self._queue or self._health_now)

    def set_hello(self, hello: Hello) -> None:
        """Publish a hello now and repeat it periodically so late subscribers catch up."""
        self.hello = hello
        self.set_hello_body(hello.to_body())

    def set_hello_body(self, body: Mapping[str, Any]) -> None:
        """``set_hello`` with the body already built (the sidecar gets it so)."""
        self._hello = body
        self.publish(HELLO, body)

    def skip(self, n: int) -> None:
        """Leave ``n`` sequence numbers out: events lost before they reached this publisher (the
        sidecar's ring was full), so a subscriber counts them as missed."""
        for _ in range(n):
            next(self._seq)

    def health(self) -> Health:
        return Health(
            sent=self.sent,
            dropped=self.dropped,
            queue=len(self._queue),
            queue_max=self.queue_size,
            hook_errors=self.hook_errors,
            discarded_rows=self.discarded_rows,
            encode_errors=self.encode_errors,
            disabled=self.disabled,
            paused=self.paused,
            last_error=self.last_error,
            engine_error=self.engine_error,
            started=self.started,
            final=self._final,
            curve_refused=self.curve_refused,
            endpoint=self.bound_endpoint,
        )

    @property
    def curve_refused(self) -> int:
        """Handshakes refused by CURVE (retries included); 0 without CURVE."""
        return self.admission.refused if self.admission is not None else 0

    def close(self, timeout: float = 2.0) -> None:
        """Flush what is queued (up to ``timeout``), send a last health event, close the socket."""
        if self._stop:
            return
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)

    # -- sender thread ---------------------------------------------------------------------------

    def _send(self, kind: str, seq: int, ts: float, body: Mapping[str, Any] | Deferred) -> None:
        assert self._sock is not None
        try:
            fields = body.resolve() if isinstance(body, Deferred) else body
            frame = encode(kind, self.src, seq, ts, fields)
        except Exception as exc:  # a bad value must cost one event, not the thread
            self.encode_errors += 1
            self.last_error = f"encode {kind}: {type(exc).__name__}: {exc}"[:300]
            return
        try:
            self._sock.send(frame, zmq.NOBLOCK)
            self.sent += 1
        except zmq.Again:
            self.dropped += 1

    def _drain_refusals(self) -> None:
        if self._monitor is None or self.admission is None:
            return
        from eagle3_top.tracer.transport.curve import drain_refusals

        try:
            drain_refusals(self._monitor, self.admission)
        except Exception:  # the log of refusals is not worth the stream
            self._monitor.close(0)
            self._monitor = None

    def _close_curve(self, sock: zmq.Socket) -> None:
        if self._monitor is not None:
            sock.disable_monitor()
            self._monitor.close(0)
            self._monitor = None
        if self.admission is not None:
            from eagle3_top.tracer.transport.curve import release

            release(self._ctx, self.admission)

    def _next_seq(self) -> int:
        return next(self._seq)

    def _new_subscriber(self) -> bool:
        """Drain subscription messages; True when someone (re)subscribed."""
        assert self._sock is not None
        joined = False
        while self._sock.poll(0, zmq.POLLIN):
            msg = self._sock.recv(zmq.NOBLOCK)
            if msg[:1] == b"\x01":
                joined = True
                self.subscriptions += 1
        return joined

    def _run(self) -> None:
        next_hello = time.monotonic() + self._hello_interval
        next_health = time.monotonic() + self._health_interval
        queue = self._queue
        try:
            while True:
                while queue:
                    self._send(*queue.popleft())
                now = time.monotonic()
                if now >= next_health or self._health_now:
                    next_health = now + self._health_interval
                    self._health_now = False
                    self._send(HEALTH, self._next_seq(), time.time(), self.health().to_body())
                self._drain_refusals()
                if self._new_subscriber() and self._hello is not None:
                    next_hello = now
                if now >= next_hello:
                    next_hello = now + self._hello_interval
                    if self._hello is not None:
                        self._send(HELLO, self._next_seq(), time.time(), self._hello)
                if self._stop:
                    break
                self._idle = True
                if not queue:
                    self._wake.wait(self.flush_interval_s)
                self._wake.clear()
                self._idle = False
            while queue:
                self._send(*queue.popleft())
            self._final = True
            self._send(HEALTH, self._next_seq(), time.time(), self.health().to_body())
        except Exception as exc:  # never take the serving process down
            self.disabled = True
            log.error("eagle3-top publisher stopped: %s", exc)
        finally:
            if self._sock is not None:
                self._close_curve(self._sock)
                self._sock.close()
                self._sock = None


class MemoryPublisher(TracerState):
    """What a ``Tracer`` uses of a ``Publisher``, keeping events in memory, unencoded: for tests,
    benchmarks and in-process tools that want the bodies without a socket."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []

    def publish(self, kind: str, body: Any) -> bool:
        self.events.append((kind, body))
        return True

    def set_hello(self, hello: Hello) -> None:
        self.publish(HELLO, hello.to_body())

    def bodies(self, kind: str) -> list[Any]:
        """Bodies of one kind, deferred ones resolved (this waits for their device copies)."""
        return [b.resolve() if isinstance(b, Deferred) else b for k, b in self.events if k == kind]
