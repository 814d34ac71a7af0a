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

from .schema import HEALTH, KINDS, DecodeError, Event, decode

if TYPE_CHECKING:
    from .curve import CurveClient

# Monitor events we turn into a state string for each endpoint.
_STATES = {
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


# Periodic events (hello, health) take their seq when sent, queued ones when queued, so a periodic
# event can overtake up to a publisher queue's worth of others: a fall back within this window is
# reordering, a fall further back is a new publisher under the same id (a container restart keeps
# host and pid).
REORDER_WINDOW = 1 << 17
# A jump forward beyond this is no loss a server could have produced (days of events at full
# rate): a spoofed or corrupt seq, counted as a resync instead of as billions of missed events.
MAX_GAP = 1 << 32


@dataclass(frozen=True)
class Loss:
    """A copy of one source's counters, by kind of loss (see ``SourceCounters``)."""

    received: int = 0
    gaps: int = 0
    publisher_dropped: int = 0
    slow_consumer: int = 0
    late_join: int = 0
    restarts: int = 0
    resyncs: int = 0

    def describe(self) -> str:
        """One line, only the kinds that occurred."""
        parts = []
        if self.slow_consumer:
            parts.append(f"{self.slow_consumer} lost in transit (a slow reader or the link)")
        if self.publisher_dropped:
            parts.append(f"{self.publisher_dropped} dropped by the tracer (its queue was full)")
        if self.restarts:
            parts.append(f"{self.restarts} restart(s)")
        if self.resyncs:
            parts.append(f"{self.resyncs} implausible seq jump(s)")
        if self.late_join:
            parts.append(f"joined late ({self.late_join} events before)")
        return "; ".join(parts) or "no loss"


@dataclass
class SourceCounters:
    """Honest loss accounting for one source, by kind of loss.

    - ``late_join``: events the source published before we first heard it (not a loss of ours);
    - ``gaps``: holes in ``seq`` since, i.e. events the publisher numbered that never arrived;
      ``publisher_dropped`` of them were dropped by the tracer itself (its queue was full, as its
      health events say), the rest were lost on the way (``slow_consumer``: a full queue at either
      end of the socket, or a link that went down);
    - ``restarts``: a new publisher under the same id (seq fell back, or its start time changed);
      ``resyncs``: implausible jumps of seq, not counted as loss.
    """

    first_seq: int
    max_seq: int
    received: int = 0  # in the current epoch
    total: int = 0  # over all epochs
    last_recv: float = field(default_factory=time.monotonic)
    late_join: int = -1  # set from the first seq
    gaps_before: int = 0  # holes of earlier epochs
    restarts: int = 0
    resyncs: int = 0
    started: float | None = None  # the publisher's start time, from its health events
    dropped_at_join: int | None = None  # the publisher's own drop counter when we first saw it
    dropped_now: int = 0

    def __post_init__(self) -> None:
        if self.late_join < 0:
            self.late_join = self.first_seq

    @property
    def gaps(self) -> int:
        # Robust to the reordering of a periodic event against a queued one: count holes, not jumps.
        return self.gaps_before + max(0, self.max_seq - self.first_seq + 1 - self.received)

    @property
    def missed(self) -> int:
        return self.gaps

    @property
    def publisher_dropped(self) -> int:
        return 0 if self.dropped_at_join is None else max(0, self.dropped_now - self.dropped_at_join)

    @property
    def slow_consumer(self) -> int:
        return max(0, self.gaps - self.publisher_dropped)

    def loss(self) -> Loss:
        return Loss(
            self.total, self.gaps, self.publisher_dropped, self.slow_consumer, self.late_join,
            self.restarts, self.resyncs,
        )  # fmt: skip

    def _new_epoch(self, seq: int) -> None:
        self.gaps_before = self.gaps
        self.first_seq = self.max_seq = seq
        self.received = 0
        self.dropped_at_join = None

    def see(self, seq: int) -> None:
        if seq > self.max_seq + MAX_GAP:
            self.resyncs += 1
            self._new_epoch(seq)
        elif seq + REORDER_WINDOW < self.max_seq:
            self.restarts += 1
            self._new_epoch(0)  # the events of the new publisher before this one were missed
            self.started = None  # its first health names the new start time, not another restart
        if seq < self.first_seq:
            self.first_seq = seq
        if seq > self.max_seq:
            self.max_seq = seq
        self.received += 1
        self.total += 1
        self.last_recv = time.monotonic()

    def see_health(self, body: dict[str, object]) -> None:
        """The publisher's own view: its start time (a restart when it changes) and drop counter."""
        started, dropped = body.get("started"), body.get("dropped")
        if type(started) is float:
            if self.started is not None and started != self.started:
                # A restart whose seq did not fall back past the reordering window (it had sent
                # little): its events so far were counted into the old epoch; start afresh.
                self.restarts += 1
                self._new_epoch(0)
            self.started = started
        if type(dropped) is int and dropped >= 0:
            if self.dropped_at_join is None or dropped < self.dropped_now:
                self.dropped_at_join = dropped
            self.dropped_now = dropped


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
        self.evicted_sources = 0
        self.undecodable = 0  # malformed frames that named no source (no envelope)
        self.last_undecodable: str | None = None
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
            event = msg["event"]
            state = _refusal(event, msg["value"], self._sock.mechanism == zmq.CURVE) or _STATES.get(event)
            ep = msg.get("endpoint", b"")
            ep_s = ep.decode() if isinstance(ep, bytes) else str(ep)
            if state is not None and ep_s in self.endpoints:
                if self.endpoints[ep_s].startswith(_REFUSED) and event != zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    continue
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
            self.undecodable += 1
            self.last_malformed = self.last_undecodable = str(exc)
            return None
        counters = self.sources.get(ev.src)
        if counters is None:
            if len(self.sources) >= self.max_sources:
                self._evict()
            self.sources[ev.src] = counters = SourceCounters(ev.seq, ev.seq)
        if ev.kind == HEALTH:
            counters.see_health(ev.body)
        counters.see(ev.seq)
        if ev.kind not in KINDS:
            self.unknown_kinds += 1
            return None
        return ev

    def _evict(self) -> None:
        """Hostile or buggy publishers could invent a source per frame: forget the stalest eighth
        at once, so that a flood of new ids costs a sort per many frames, not a scan per frame."""
        by_age = sorted(self.sources, key=lambda k: self.sources[k].last_recv)
        for key in by_age[: max(1, len(by_age) // 8)]:
            del self.sources[key]
            self.evicted_sources += 1

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
