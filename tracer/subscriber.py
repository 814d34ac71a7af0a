"""Subscriber: one SUB socket connected to many endpoints, with per-source and per-endpoint state.

ZeroMQ reconnects by itself; a monitor socket tells us when an endpoint connects, drops or keeps
retrying, so the UI can say which endpoint is down. Frames that do not decode are counted, with
the last error kept for display, and never raised.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import zmq
from zmq.utils.monitor import recv_monitor_message

from .schema import KINDS, DecodeError, Event, decode

if TYPE_CHECKING:
    from .curve import CurveClient

# Monitor events we turn into a state string for each endpoint.
_STATES = {
    zmq.EVENT_CONNECTED: "connected",
    zmq.EVENT_CONNECT_DELAYED: "connecting",
    zmq.EVENT_CONNECT_RETRIED: "down (retrying)",
    zmq.EVENT_DISCONNECTED: "disconnected",
    zmq.EVENT_CLOSED: "closed",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed (protocol)",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "handshake failed (auth)",
}


@dataclass
class SourceCounters:
    first_seq: int
    max_seq: int
    received: int = 0
    last_recv: float = field(default_factory=time.monotonic)

    @property
    def missed(self) -> int:
        # Robust to the reordering of a periodic event against a queued one: count holes, not jumps.
        return max(0, self.max_seq - self.first_seq + 1 - self.received)

    def see(self, seq: int) -> None:
        if seq < self.first_seq:
            self.first_seq = seq
        if seq > self.max_seq:
            self.max_seq = seq
        self.received += 1
        self.last_recv = time.monotonic()


class Subscriber:
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
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RECONNECT_IVL, 200)
        self._sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        if curve is not None:
            self._sock.curve_serverkey = curve.server_public
            self._sock.curve_publickey = curve.public
            self._sock.curve_secretkey = curve.secret
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._monitor = self._sock.get_monitor_socket()
        self.endpoints: dict[str, str] = {}
        self.sources: dict[str, SourceCounters] = {}
        self.max_sources = max_sources
        self.malformed = 0
        self.last_malformed: str | None = None
        self.unknown_kinds = 0
        self.frames = 0
        self.bytes = 0
        for ep in endpoints:
            self.add_endpoint(ep)

    def add_endpoint(self, endpoint: str) -> None:
        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        self._sock.connect(endpoint)
        self.endpoints[endpoint] = "connecting"

    def _drain_monitor(self) -> None:
        while self._monitor.poll(0):
            try:
                msg = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            state = _STATES.get(msg["event"])
            ep = msg.get("endpoint", b"")
            ep_s = ep.decode() if isinstance(ep, bytes) else str(ep)
            if state is not None and ep_s in self.endpoints:
                self.endpoints[ep_s] = state

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

    def decode_frame(self, frame: bytes) -> Event | None:
        """Decode and count; None for a malformed frame or an unknown kind."""
        self.frames += 1
        self.bytes += len(frame)
        try:
            ev = decode(frame)
        except DecodeError as exc:
            self.malformed += 1
            self.last_malformed = str(exc)
            return None
        counters = self.sources.get(ev.src)
        if counters is None and len(self.sources) >= self.max_sources:
            # Hostile or buggy publishers could invent a source per frame; forget the stalest.
            stalest = min(self.sources, key=lambda k: self.sources[k].last_recv)
            del self.sources[stalest]
        if counters is None:
            self.sources[ev.src] = counters = SourceCounters(ev.seq, ev.seq)
        counters.see(ev.seq)
        if ev.kind not in KINDS:
            self.unknown_kinds += 1
            return None
        return ev

    def poll(self, timeout_ms: int = 100, max_events: int = 4096) -> list[Event]:
        out = []
        for frame in self.recv_frames(timeout_ms, max_events):
            ev = self.decode_frame(frame)
            if ev is not None:
                out.append(ev)
        return out

    def count_malformed(self, reason: str) -> None:
        """For errors found after decoding (bad columns in a step, say)."""
        self.malformed += 1
        self.last_malformed = reason

    def close(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(0)
        self._sock.close(0)
