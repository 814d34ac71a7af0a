"""Subscriber: one SUB socket connected to many endpoints, with per-source and per-endpoint state.

ZeroMQ reconnects by itself; a monitor socket tells us when an endpoint connects, drops or keeps
retrying, so the UI can say which endpoint is down. Decoding and counting is ``FrameLedger``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import zmq
from eagle3_top.tracer.reader.ledger import MAX_GAP, REORDER_WINDOW, FrameLedger, Loss, SourceCounters
from eagle3_top.tracer.schema import Event
from zmq.utils.monitor import recv_monitor_message

if TYPE_CHECKING:
    from eagle3_top.tracer.transport.curve import CurveClient

# re-exported: the counters were born here, and readers import them from here
__all__ = ["MAX_GAP", "REORDER_WINDOW", "FrameLedger", "Loss", "SourceCounters", "Subscriber"]

# Monitor events we turn into a state string for each endpoint.
_STATES: dict[int, str] = {
    zmq.EVENT_CONNECTED: "connected",
    zmq.EVENT_HANDSHAKE_SUCCEEDED: "connected",
    zmq.EVENT_CONNECT_DELAYED: "connecting",
    zmq.EVENT_CONNECT_RETRIED: "down (retrying)",
    zmq.EVENT_DISCONNECTED: "disconnected",
    zmq.EVENT_CLOSED: "closed",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed (protocol)",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused by the server (not admitted)",
}

# libzmq gives up on an endpoint whose server refused the handshake (its ZAP handler said no, or
# the two ends disagree on CURVE), and the "disconnected" that follows would hide why for good.
# So a refusal stays until a handshake succeeds; a TCP connect clears nothing, one precedes each.
_REFUSED = "refused by the server"


def _refusal(event: int, value: int, curve: bool) -> str | None:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        why = "key not admitted" if value == 400 else f"ZAP status {value}"  # 400: the handler said no
        return f"{_REFUSED} (CURVE: {why})"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        if curve:
            return f"{_REFUSED} (CURVE: it publishes plain text)"
        return f"{_REFUSED} (CURVE: it needs --curve-server-key and --curve-client-secret)"
    return None


def sub_socket(context: zmq.Context, curve: CurveClient | None, rcvhwm: int) -> zmq.Socket:
    """A SUB socket subscribed to everything, reconnecting quickly, CURVE keys set; not connected."""
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 200)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
    if curve is not None:
        sock.curve_serverkey = curve.server_public
        sock.curve_publickey = curve.public
        sock.curve_secretkey = curve.secret
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    return sock


def drain_endpoint_states(monitor: zmq.Socket, endpoints: dict[str, str], curve: bool) -> None:
    """Fold a connecting socket's monitor events into ``endpoints`` (endpoint -> state words)."""
    while monitor.poll(0):
        try:
            msg = recv_monitor_message(monitor, zmq.NOBLOCK)
        except zmq.Again:
            return
        event = msg["event"]
        state = _refusal(event, msg["value"], curve) or _STATES.get(event)
        ep = msg.get("endpoint", b"")
        ep_s = ep.decode() if isinstance(ep, bytes) else str(ep)
        if state is not None and ep_s in endpoints:
            if endpoints[ep_s].startswith(_REFUSED) and event != zmq.EVENT_HANDSHAKE_SUCCEEDED:
                continue
            endpoints[ep_s] = state


# A connection's share of the receive budget never goes below this: a hello and a burst fit.
MIN_RCVHWM = 16


def rcvhwm_share(budget: int, connections: int) -> int:
    """libzmq's receive high-water mark is per connection: ``budget`` frames for the whole socket,
    split over its ``connections`` (0: no mark, as libzmq reads it)."""
    return 0 if budget <= 0 else max(MIN_RCVHWM, budget // max(1, connections))


class Subscriber(FrameLedger):
    """One SUB socket connected to many endpoints; the counters of ``FrameLedger``.

    ``rcvhwm`` bounds the frames waiting in the socket, over all its endpoints together: libzmq
    counts its mark per connection, so 64 endpoints at a mark of 100,000 each let a reader that
    fell behind hold 6.4 million frames (gigabytes). Past the mark the connection stops reading,
    the publisher's own socket drops what it cannot queue, and the reader counts those as holes
    in the sources' ``seq`` (``FrameLedger``): dropped and counted, memory bounded."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        curve: CurveClient | None = None,
        rcvhwm: int = 100_000,
        max_sources: int = 1024,
        context: zmq.Context | None = None,
    ) -> None:
        self._ctx = context or zmq.Context.instance()
        self.rcvhwm_budget = rcvhwm
        self._sock = sub_socket(self._ctx, curve, rcvhwm_share(rcvhwm, len(endpoints)))
        self._monitor = self._sock.get_monitor_socket()
        super().__init__(max_sources)
        for ep in endpoints:
            self.add_endpoint(ep)

    @property
    def socket(self) -> zmq.Socket:
        """The SUB socket, for a caller that polls several subscribers together."""
        return self._sock

    def add_endpoint(self, endpoint: str) -> None:
        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        self._sock.connect(endpoint)
        self.endpoints[endpoint] = "connecting"
        self._share_rcvhwm()

    def _share_rcvhwm(self) -> None:
        # libzmq applies a new mark to the connections already made too
        share = rcvhwm_share(self.rcvhwm_budget, len(self.endpoints))
        if share != self._sock.getsockopt(zmq.RCVHWM):
            self._sock.setsockopt(zmq.RCVHWM, share)

    def remove_endpoint(self, endpoint: str) -> None:
        """Disconnect and forget its state; the sources heard through it keep their evidence (they
        go stale). An endpoint never added is ignored."""
        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        if self.endpoints.pop(endpoint, None) is None:
            return
        try:
            self._sock.disconnect(endpoint)
        except zmq.ZMQError:  # libzmq forgot it already (ENOENT): nothing left to close
            pass
        self._share_rcvhwm()

    def _drain_monitor(self) -> None:
        drain_endpoint_states(self._monitor, self.endpoints, self._sock.mechanism == zmq.CURVE)

    def recv_frames(self, timeout_ms: int, max_frames: int = 4096) -> list[bytes]:
        """Wait up to ``timeout_ms`` for a first frame, then take what is already queued."""
        self._drain_monitor()
        frames: list[bytes] = []
        if not self._sock.poll(timeout_ms):
            return frames
        sock = self._sock
        try:
            while len(frames) < max_frames:
                frames.append(sock.recv(zmq.NOBLOCK))
        except zmq.Again:
            pass
        return frames

    def poll(self, timeout_ms: int = 100, max_events: int = 4096) -> list[Event]:
        out = []
        for frame in self.recv_frames(timeout_ms, max_events):
            ev = self.decode_frame(frame)
            if ev is not None:
                out.append(ev)
        return out

    def close(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(0)
        self._sock.close(0)
