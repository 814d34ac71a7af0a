"""A relay: many publishers fanned into one endpoint by pyzmq's own proxy (``zmq.proxy_steerable``).

Frames pass byte for byte, so a subscriber of the relay sees every source under its own key, as if
it were connected to each publisher. The frontend is a SUB connected to every upstream publisher
and subscribed to everything; the backend is a PUB. Not an XPUB: libzmq's proxy copies to the
capture socket what crosses it in both directions, and an XPUB passes what its peers send (an XSUB
peer may send anything) up through the proxy, into the capture and on to the engines; a PUB reads
nothing, so the relay carries one way only. The price: a subscriber's arrival reaches no publisher,
so it gets each source's hello with that publisher's next periodic one (every 5 s by default).

The proxy runs in C without the GIL on a thread of its own; a control socket asks it for its
counters and stops it. With ``capture_hwm`` every frame is also copied to an inproc PUB socket
(``capture_endpoint``): a PUB drops what its reader has not taken past the high-water mark, so a
slow reader (the recorder) never slows the forwarding.
"""

from __future__ import annotations

import errno
import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zmq
from eagle3_top.tracer.reader.subscriber import drain_endpoint_states, sub_socket

if TYPE_CHECKING:
    from eagle3_top.tracer.transport.curve import Admission, CurveClient, CurveServer

DEFAULT_RCVHWM = 100_000  # as a Subscriber's: a burst from many publishers waits here
DEFAULT_SNDHWM = 10_000  # as a Publisher's: a slow subscriber loses frames, nobody waits for it
_ids = itertools.count()


class RelayError(Exception):
    """A relay that cannot start (a bind refused, say); one line."""


@dataclass(frozen=True)
class RelayCounts:
    """The proxy's own counters (libzmq's STATISTICS)."""

    received: int  # frames read from the upstream publishers
    received_bytes: int
    sent: int  # frames handed to the bound PUB (it drops, uncounted, for a subscriber past its HWM)
    sent_bytes: int


def bind_error(endpoint: str, exc: zmq.ZMQError) -> str:
    why = "address in use" if exc.errno == errno.EADDRINUSE else str(exc.strerror or exc).lower()
    return f"cannot bind {endpoint}: {why}"


class Relay:
    """Binds and connects on construction (a bad bind raises ``RelayError`` before any thread
    starts); ``start`` runs the proxy, ``stop`` ends it and closes every socket."""

    def __init__(
        self,
        bind: str,
        upstreams: list[str],
        *,
        client_curve: CurveClient | None = None,
        server_curve: CurveServer | None = None,
        capture_hwm: int | None = None,
        rcvhwm: int = DEFAULT_RCVHWM,
        sndhwm: int = DEFAULT_SNDHWM,
        context: zmq.Context | None = None,
    ) -> None:
        self.context = ctx = context or zmq.Context.instance()
        self.upstreams: dict[str, str] = {}  # endpoint -> state, as a Subscriber words it
        self._client_curve = client_curve is not None
        self.admission: Admission | None = None
        self._refusals: zmq.Socket | None = None
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why the proxy stopped on its own
        self.final: RelayCounts | None = None
        self._lock = threading.Lock()  # one exchange at a time on the control socket
        n = next(_ids)
        self._backend = backend = ctx.socket(zmq.PUB)
        self._frontend = frontend = sub_socket(ctx, client_curve, rcvhwm)
        self._sockets = [backend, frontend]
        try:
            backend.setsockopt(zmq.SNDHWM, sndhwm)
            backend.setsockopt(zmq.LINGER, 200)
            if server_curve is not None:
                from eagle3_top.tracer.transport.curve import serve

                self.admission = serve(ctx, backend, server_curve, bind)
                self._refusals = backend.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
                self._sockets.append(self._refusals)
            try:
                backend.bind(bind)
            except zmq.ZMQError as exc:
                raise RelayError(bind_error(bind, exc)) from None
            self.bound_endpoint: str = backend.getsockopt_string(zmq.LAST_ENDPOINT)
            if self.admission is not None:
                self.admission.label = self.bound_endpoint
            self._monitor = frontend.get_monitor_socket()
            self._sockets.append(self._monitor)
            for ep in upstreams:
                try:
                    frontend.connect(ep)
                except zmq.ZMQError as exc:
                    raise RelayError(f"cannot connect to {ep}: {exc.strerror or exc}") from None
                self.upstreams[ep] = "connecting"
            self.capture_endpoint: str | None = None
            self._capture: zmq.Socket | None = None
            if capture_hwm is not None:
                self._capture = ctx.socket(zmq.PUB)
                self._sockets.append(self._capture)
                self._capture.setsockopt(zmq.SNDHWM, capture_hwm)
                self._capture.setsockopt(zmq.LINGER, 0)
                self.capture_endpoint = f"inproc://eagle3-top-relay-capture-{n}"
                self._capture.bind(self.capture_endpoint)
            self._control = ctx.socket(zmq.PAIR)  # the proxy's end
            self._steer = ctx.socket(zmq.PAIR)  # ours
            self._sockets += [self._control, self._steer]
            self._control.bind(f"inproc://eagle3-top-relay-control-{n}")
            self._steer.connect(f"inproc://eagle3-top-relay-control-{n}")
        except BaseException:
            self._close()
            raise

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="eagle3-top-relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            zmq.proxy_steerable(self._frontend, self._backend, self._capture, self._control)
        except zmq.ZMQError as exc:
            self.error = f"the proxy stopped: {exc.strerror or exc}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _ask(self, command: bytes) -> list[bytes] | None:
        """One command to the running proxy; its reply for STATISTICS."""
        if not self.running:
            return None
        with self._lock:
            self._steer.send(command)
            if command != b"STATISTICS":
                return None
            while True:
                while not self._steer.poll(100):
                    if not self.running:
                        return None
                reply = self._steer.recv_multipart()
                # libzmq 4.3.5 answers every command, earlier ones only this: skip an empty answer
                if len(reply) == 8:
                    return reply

    def counts(self) -> RelayCounts:
        """The proxy's counters now (the last ones once stopped)."""
        reply = self._ask(b"STATISTICS")
        if reply is None:
            return self.final or RelayCounts(0, 0, 0, 0)
        front_in, front_in_b, _, _, _, _, back_out, back_out_b = (int.from_bytes(f, "little") for f in reply)
        return RelayCounts(front_in, front_in_b, back_out, back_out_b)

    def poll_states(self) -> None:
        """Update ``upstreams`` from the frontend's monitor and log refused downstream clients;
        call it from one thread (the one that calls ``stop``), every second or so."""
        drain_endpoint_states(self._monitor, self.upstreams, self._client_curve)
        if self._refusals is not None and self.admission is not None:
            from eagle3_top.tracer.transport.curve import drain_refusals

            drain_refusals(self._refusals, self.admission)

    def stop(self, timeout: float = 2.0) -> RelayCounts:
        """Pause the proxy, take its final counters, end it, close every socket; the counters.
        Every frame counted was copied to the capture socket before this returns."""
        if self._thread is not None and self.final is None:
            self._ask(b"PAUSE")  # nothing more forwarded: the counters below are the last
            self.final = self.counts()
            self._ask(b"TERMINATE")
            self._thread.join(timeout)
        self._close()
        return self.final or RelayCounts(0, 0, 0, 0)

    def _close(self) -> None:
        if self.admission is not None:
            from eagle3_top.tracer.transport.curve import release

            release(self.context, self.admission)
        if self._sockets:
            self._backend.disable_monitor()
            self._frontend.disable_monitor()
        for sock in self._sockets:
            sock.close()
        self._sockets = []
