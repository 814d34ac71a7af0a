"""The exporter's receive worker: one thread owns the Subscriber and folds into the evidence book
only what /metrics serves. No per-request tracking (the book's ``track_requests`` is off), no
proposals, no snapshots: what only the monitor draws is never built.

Per fold (at most ``max_fold`` frames, received ``recv_batch`` at a time; the socket's high-water
mark, ``RCVHWM`` frames over all endpoints, bounds what waits behind them, and what the publishers
drop past it shows as holes in the sources' seq, counted by the ledger): ``Subscriber.recv_frames``
→ ``FrameLedger.decode_frame``, outside the lock → under it, ``EvidenceBook.ingest`` and each
source's fold lag (``lag.FoldLag``). The findings engine runs
on the same thread, outside the lock, at most once a second per source (``Diagnoser``). A scrape
takes the lock once, for ``figures``: a few array copies per source.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from eagle3_top.tracer.analysis.book_worker import POLL_MS, BookWorker
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS, Thresholds
from eagle3_top.tracer.reader.subscriber import Subscriber

from .figures import Figures, copy_figures
from .lag import FoldLag

RECV_BATCH = 256  # frames per receive call
# Frames that may wait in the socket, over all endpoints together (``Subscriber``: libzmq's mark is
# per connection, split here). 64 sources at 500 step events/s fill it in 1 s: past it the
# publishers' sockets drop, and those drops are holes in seq (eagle3_receive_dropped_events). With
# the mark per connection at 100,000, 64 sources let a fold that fell behind hold gigabytes.
RCVHWM = 32_768
MAX_FOLD = 1024  # frames per fold: the lock is held for one fold (~3 ms)
# After a receive that found fewer than RECV_BATCH frames the worker waits this long, then takes
# what gathered (up to MAX_FOLD) and folds it at once. A fold costs per event, per (source, verify
# width) group (~15 us) and per wakeup: at 64 sources x 100 events/s the book alone took 9 us an
# event folded every 25 ms (the monitor's rhythm, for its screens), 3.2 us every 100 ms, and the
# whole exporter 14.8 % of a core every 100 ms, 13.0 % every 250 ms. A backlog never waits.
# Prometheus scrapes every 15 s: 250 ms is fresh enough, and what it adds shows in the fold lag.
GATHER_S = 0.25


class ExportFeed(BookWorker):
    """Subscribe to ``endpoints`` and keep, per source, what the exporter's metrics read."""

    thread_name = "eagle3-top-export-feed"

    def __init__(
        self,
        endpoints: list[str],
        *,
        manifest: Manifest | None = None,
        book: EvidenceBook | None = None,
        subscriber_factory: Callable[[list[str]], Subscriber] | None = None,
        stale_after_s: float = THRESHOLDS.stale_after_s,
        thresholds: Thresholds = THRESHOLDS,
        baseline_tok_s: float | None = None,
        poll_ms: int = POLL_MS,
        recv_batch: int = RECV_BATCH,
        max_fold: int = MAX_FOLD,
        gather_s: float = GATHER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            endpoints,
            book=book if book is not None else EvidenceBook(manifest=manifest),
            manifest=manifest,
            subscriber_factory=subscriber_factory or (lambda eps: Subscriber(eps, rcvhwm=RCVHWM)),
            stale_after_s=stale_after_s,
            thresholds=thresholds,
            baseline_tok_s=baseline_tok_s,
            poll_ms=poll_ms,
            clock=clock,
        )
        self.book.track_requests = False  # nothing here reads the per-request figures
        self.lag = FoldLag()
        self._recv_batch = recv_batch
        self._max_fold = max(max_fold, recv_batch)
        self._gather_s = gather_s
        self._evictions_seen = 0

    def start(self) -> ExportFeed:
        super().start()
        return self

    # -- the scrape's side -----------------------------------------------------------------------

    def figures(self, now: float | None = None) -> Figures:
        """One copy of everything /metrics serves, taken under the lock."""
        now = self._clock() if now is None else now
        with self._lock:
            return copy_figures(self.book, self.diagnoses, self._sub, self.lag, now, self.running)

    # -- worker ----------------------------------------------------------------------------------

    def _pump(self, sub: Subscriber) -> None:
        """Receive (waiting up to a poll interval for a first frame), let a trickle gather, take up
        to ``max_fold`` frames in bounded receive batches and fold them in."""
        frames = sub.recv_frames(self._poll_ms, self._recv_batch)
        if not frames:
            return
        if len(frames) < self._recv_batch:
            self._stop.wait(self._gather_s)
        caught_up = False  # the socket was found empty: nothing waits behind these frames
        while len(frames) < self._max_fold:
            want = min(self._recv_batch, self._max_fold - len(frames))
            more = sub.recv_frames(0, want)
            frames += more
            if len(more) < want:
                caught_up = True
                break
        # decoded outside the lock: the ledger's counters are written by this thread only, and a
        # scrape copies them with single C-level reads
        events = [ev for ev in map(sub.decode_frame, frames) if ev is not None]
        newest = {ev.src: ev.ts for ev in events}  # per source, its newest event's stamp
        now = self._clock()
        with self._lock:
            self.book.ingest(events, now, sub.count_malformed)
            self.lag.fold(newest, now, caught_up)
            if self.book.dropped_sources != self._evictions_seen:
                self._evictions_seen = self.book.dropped_sources
                self.lag.forget(self.book.sources)
            self.batches += 1
