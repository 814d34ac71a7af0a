"""Per-source accounting of a stream of frames, whatever carries them (a socket or a recording):
decode each frame, count what was malformed or of an unknown kind, and track every source's ``seq``
to tell loss from reordering and restarts. Frames that do not decode are counted, with the last
error kept for display, and never raised.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from eagle3_top.tracer.reader.eviction import Evictions, make_room
from eagle3_top.tracer.schema import HEALTH, HELLO, KINDS, STEP, BadFrame, DecodeError, Event, decode

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
    in_file: int = 0  # a recording's: received, then lost with a damaged part of the file

    def describe(self) -> str:
        """One line, only the kinds that occurred."""
        parts = []
        if self.in_file:
            parts.append(f"{self.in_file} lost with a damaged part of the file")
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
    heard_hello: bool = False  # frames of these kinds came (bodies unchecked): the eviction's proof
    heard_step: bool = False

    def eviction_rank(self) -> tuple[int, float]:
        return self.heard_hello + self.heard_step, self.last_recv

    def __post_init__(self) -> None:
        if self.late_join < 0 and self.first_seq > MAX_GAP:
            # A first seq past any plausible count is no late join of billions of events either.
            self.late_join = 0
            self.resyncs += 1
        elif self.late_join < 0:
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
        if self.dropped_at_join is None:
            return 0
        # A dropped event still took its seq, so the tracer's drops are among the holes: a health
        # counter claiming more is no figure to show.
        return min(max(0, self.dropped_now - self.dropped_at_join), self.gaps)

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

    def see(self, seq: int, kind: str = "") -> None:
        if kind == HELLO:
            self.heard_hello = True
        elif kind == STEP:
            self.heard_step = True
        if seq > self.max_seq + MAX_GAP:
            self.resyncs += 1
            self._new_epoch(seq)
        elif seq + REORDER_WINDOW < self.max_seq:
            if seq > MAX_GAP:
                # No new publisher has counted that far: a fall back to such a seq is as implausible
                # as a jump forward, and counting the new epoch from 0 would turn it into loss.
                self.resyncs += 1
                self._new_epoch(seq)
            else:
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


class FrameLedger:
    """Decodes frames and keeps the counters of everything seen: per source (``SourceCounters``)
    and over all (malformed, unknown kinds, frames, bytes). ``max_sources`` bounds the memory a
    stream inventing a new source id per frame can take."""

    def __init__(self, max_sources: int = 1024) -> None:
        self.endpoints: dict[str, str] = {}
        self.reset_counters(max_sources)

    def reset_counters(self, max_sources: int | None = None) -> None:
        """Forget every count (a replay that seeks back starts over)."""
        self.sources: dict[str, SourceCounters] = {}
        if max_sources is not None:
            self.max_sources = max_sources
        self.malformed = 0
        self.last_malformed: str | None = None
        self.unknown_kinds = 0
        self.evictions = Evictions()
        self.undecodable = 0  # malformed frames that named no source (no envelope)
        self.last_undecodable: str | None = None
        self.frames = 0
        self.bytes = 0

    def decode_frame(self, frame: bytes) -> Event | None:
        """Decode and count; None for a malformed frame or an unknown kind."""
        self.frames += 1
        self.bytes += len(frame)
        try:
            ev = decode(frame)
        except BadFrame as exc:  # it names its source: counted there, its seq no hole
            self.malformed += 1
            self.last_malformed = f"{exc.src}: {exc}"
            self._counters(exc.src, exc.seq).see(exc.seq)
            return None
        except DecodeError as exc:
            self.malformed += 1
            self.undecodable += 1
            self.last_malformed = self.last_undecodable = str(exc)
            return None
        counters = self._counters(ev.src, ev.seq)
        if ev.kind == HEALTH:
            counters.see_health(ev.body)
        counters.see(ev.seq, ev.kind)
        if ev.kind not in KINDS:
            self.unknown_kinds += 1
            return None
        return ev

    @property
    def evicted_sources(self) -> int:
        return self.evictions.total

    def _counters(self, src: str, seq: int) -> SourceCounters:
        counters = self.sources.get(src)
        if counters is None:
            if len(self.sources) >= self.max_sources:
                make_room(self.sources, self.evictions)
            self.sources[src] = counters = SourceCounters(seq, seq)
        return counters

    def count_malformed(self, reason: str) -> None:
        """For errors found after decoding (bad columns in a step, say)."""
        self.malformed += 1
        self.last_malformed = reason

    def close(self) -> None:
        """Release what carries the frames (nothing here; a socket in ``Subscriber``)."""
