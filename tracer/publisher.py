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
from typing import Any

import zmq

from .deferred import Deferred
from .schema import HEALTH, HELLO, Health, Hello, SourceId, encode

log = logging.getLogger("eagle3_top.publisher")

DEFAULT_QUEUE = 4096
DEFAULT_SNDHWM = 10_000
FLUSH_INTERVAL_S = 0.02  # worst-case latency the sender adds, and its wake-up rate when idle


class EndpointError(ValueError):
    pass


def check_bind_endpoint(endpoint: str, allow_remote: bool = False) -> None:
    """Refuse to bind a TCP endpoint reachable from other hosts unless asked to."""
    if "://" not in endpoint:
        raise EndpointError(f"{endpoint!r} is not a ZeroMQ endpoint (expected tcp://HOST:PORT or ipc://PATH)")
    transport, rest = endpoint.split("://", 1)
    if transport != "tcp" or allow_remote:
        return
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host in ("localhost",):
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
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
        self.disabled = False
        self.last_error: str | None = None

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
        curve_secret_key: bytes | None = None,
        curve_clients_dir: str | None = None,
        hello_interval_s: float = 5.0,
        health_interval_s: float = 1.0,
        context: zmq.Context | None = None,
    ) -> None:
        check_bind_endpoint(endpoint, allow_remote)
        super().__init__()
        self.endpoint = endpoint
        self.source = source
        self.src = source.key
        self.queue_size = queue_size
        self.sent = 0
        self.dropped = 0
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
        if curve_secret_key is not None:
            if curve_clients_dir is not None:
                from .curve import authorise_clients

                authorise_clients(self._ctx, curve_clients_dir)
            sock.curve_server = True
            sock.curve_secretkey = curve_secret_key
        sock.bind(endpoint)  # bind errors surface here, in the caller, once
        self.bound_endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._sock: zmq.Socket | None = sock
        self._thread = threading.Thread(target=self._run, name="eagle3-top-publisher", daemon=True)
        self._thread.start()

    # -- caller side (serving loop) -------------------------------------------------------------

    def publish(self, kind: str, body: Mapping[str, Any] | Deferred) -> bool:
        """Queue one event; False when it was dropped because the queue is full."""
        seq = next(self._seq)
        if len(self._queue) >= self.queue_size or self._stop:
            self.dropped += 1
            return False
        self._queue.append((kind, seq, time.time(), body))
        # The sender wakes on its own every FLUSH_INTERVAL_S; waking it per event would hand the
        # GIL back and forth once per verify step. Only a filling queue calls it early.
        if self._idle and len(self._queue) >= self._wake_depth:
            self._wake.set()
        return True

    def set_hello(self, hello: Hello) -> None:
        """Publish a hello now and repeat it periodically so late subscribers catch up."""
        body = hello.to_body()
        self.hello, self._hello = hello, body
        self.publish(HELLO, body)

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
        )

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

    def _next_seq(self) -> int:
        return next(self._seq)

    def _new_subscriber(self) -> bool:
        """Drain subscription messages; True when someone (re)subscribed."""
        assert self._sock is not None
        joined = False
        while self._sock.poll(0, zmq.POLLIN):
            msg = self._sock.recv(zmq.NOBLOCK)
            joined = joined or msg[:1] == b"\x01"
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
                if now >= next_health:
                    next_health = now + self._health_interval
                    self._send(HEALTH, self._next_seq(), time.time(), self.health().to_body())
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
                    self._wake.wait(FLUSH_INTERVAL_S)
                self._wake.clear()
                self._idle = False
            while queue:
                self._send(*queue.popleft())
            self._send(HEALTH, self._next_seq(), time.time(), self.health().to_body())
        except Exception as exc:  # never take the serving process down
            self.disabled = True
            log.error("eagle3-top publisher stopped: %s", exc)
        finally:
            if self._sock is not None:
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
