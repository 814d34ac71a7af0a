"""The monitor's receive worker (a ``BookWorker``: one thread owns the Subscriber, folds every frame
into the evidence book and keeps the findings fresh), with what only the monitor needs: the ``r``
key's recording, the per-request figures folded 4x a second, the endpoints file's news for the
status line, and snapshots.

The UI never sees individual events. It pulls an immutable ``Snapshot`` on its own timer (a few Hz),
so however fast the stream runs, the UI does a fixed amount of work per frame drawn; the worker
aggregates (the toolong pattern: backpressure by aggregation, not by queueing messages).
``snapshot()`` takes the lock for the few hundred microseconds it needs to copy counters out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import cast

from eagle3_top.tracer.analysis.book_worker import BookWorker
from eagle3_top.tracer.analysis.diagnosis import Diagnoser
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.requests import INTERNAL_PREFIXES
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS, Thresholds
from eagle3_top.tracer.reader.endpoints_file import Change, EndpointsFile
from eagle3_top.tracer.reader.ledger import FrameLedger
from eagle3_top.tracer.reader.replay import Position
from eagle3_top.tracer.reader.subscriber import Subscriber

from .feed_recording import FeedRecording
from .snapshot import STALE_AFTER_S, Snapshot, Transport, take_snapshot

log = logging.getLogger("eagle3_top.tui.feed")
REQUESTS_FOLD_S = 0.25
# After a small receive batch the worker waits this long before the next: frames gather (the
# socket buffers them) and are decoded and folded many at a time. At a fleet's trickle (64
# sources x 100 events/s) the worker otherwise woke for 4 events at a time, and its per-batch
# work held the GIL the UI thread's snapshot waited for. A full batch goes round at once.
BATCH_WAIT_S = 0.025
FILE_NEWS_S = 30.0  # how long "endpoints file F: +2 −1" stays up; a bad line stays until fixed


class Feed(BookWorker):
    thread_name = "eagle3-top-feed"

    def __init__(
        self,
        endpoints: list[str],
        *,
        manifest: Manifest | None = None,
        book: EvidenceBook | None = None,
        subscriber_factory: Callable[[list[str]], Subscriber] | None = None,
        stale_after_s: float = STALE_AFTER_S,
        poll_ms: int = 50,
        max_batch: int = 256,
        clock: Callable[[], float] = time.time,
        baseline_tok_s: float | None = None,
        thresholds: Thresholds = THRESHOLDS,
        internal_prefixes: Sequence[str] = INTERNAL_PREFIXES,
    ) -> None:
        super().__init__(
            endpoints,
            book=book or EvidenceBook(manifest=manifest, internal_prefixes=internal_prefixes),
            manifest=manifest,
            subscriber_factory=subscriber_factory,
            stale_after_s=stale_after_s,
            thresholds=thresholds,
            baseline_tok_s=baseline_tok_s,
            poll_ms=poll_ms,
            clock=clock,
        )
        self._max_batch = max_batch
        # the endpoints file's news ("+2 −1"): shown for FILE_NEWS_S, not as an error (``error``
        # is red: the worker died, or the endpoints file has something to fix)
        self.notice: str | None = None
        self._file_error = False  # ``error`` is the file's: cleared once the file is fine again
        self._news_until = 0.0
        self.recording = FeedRecording(self.endpoints)
        self._next_fold = 0.0

    def start(self) -> Feed:
        super().start()
        return self

    def follow_endpoints_file(self, file: EndpointsFile) -> None:
        super().follow_endpoints_file(file)
        if file.bad:
            self.error, self._file_error = Change(file.path, bad=file.bad).summary(), True

    # -- worker ----------------------------------------------------------------------------------

    def _pump(self, sub: FrameLedger) -> None:
        """Receive what is there (waiting up to a poll interval) and fold it into the book."""
        sub = cast(Subscriber, sub)  # the live feed's source is the one _open made
        frames = sub.recv_frames(self._poll_ms, self._max_batch)
        if frames:
            now = self._clock()
            self._tap(frames, now)
            # decode outside the lock (the ledger's counters are only written by this thread;
            # the UI copies them with single C-level calls), fold in under it.
            events = [ev for ev in map(sub.decode_frame, frames) if ev is not None]
            with self._lock:
                self.book.ingest(events, now, sub.count_malformed)
                self.batches += 1
            if len(frames) < self._max_batch // 4:
                self._stop.wait(BATCH_WAIT_S)

    def _tap(self, frames: list[bytes], now: float) -> None:
        """Hand the raw frames to the recording the user started (``r``), if any, stamped with the
        receive time the book gets: a replay of it then rebuilds the very same book."""
        if self.recording.active:
            self.recording.add(frames, int(now * 1e9))

    def _before_pump(self) -> None:
        self.recording.service()

    def _after_pump(self) -> None:
        self._fold_requests()

    def _file_changed(self, change: Change | None) -> None:
        now = time.monotonic()
        if change is None:
            if self.notice is not None and now > self._news_until:
                self.notice = None  # shown long enough
            return
        line = change.summary()
        if change.fine:
            self.notice, self._news_until = line, now + FILE_NEWS_S
            if self._file_error:
                self.error, self._file_error = None, False
        else:  # stays until the file is fixed
            self.error, self._file_error, self.notice = line, True, None
        log.info("%s", line)

    def _fold_requests(self) -> None:
        # Per-request figures are counted in bulk a few times a second (tracer/analysis/requests.py),
        # under the lock: the screens read the trackers. A few ms at thousands of request-steps.
        t = time.monotonic()
        if t >= self._next_fold:
            self._next_fold = t + REQUESTS_FOLD_S
            with self._lock:
                keys = list(self.book.sources)
            for key in keys:  # one source per lock hold: a snapshot never waits for all of them
                with self._lock:
                    st = self.book.sources.get(key)
                    if st is not None:
                        st.requests.fold()

    def watch_request(self, key: str | None, rid: str | None) -> None:
        """Keep every step's accept length of this request (its timeline is open); None stops."""
        with self._lock:
            for k, st in self.book.sources.items():
                st.requests.watch([rid] if k == key and rid is not None else [])

    def _closed(self) -> None:
        """The worker is ending: a recording in progress is closed whole (summary written)."""
        self.recording.close()

    def settle_findings(self, now: float | None = None) -> None:
        """Judge every source now, on the evidence as it stands (``--once``: there is no later
        refresh to catch up). A diagnoser of its own: the worker's runs outside the lock."""
        now = self._clock() if now is None else now
        with self._lock:  # the worker cannot fold events in meanwhile
            d = self.diagnoser
            judge = Diagnoser(d.manifest, d.baseline_tok_s, d.thresholds)
            fresh, _ = judge.run(self.book, now, force=True)
            self.diagnoses.update(fresh)

    # -- UI side ---------------------------------------------------------------------------------

    def position(self) -> Position | None:
        """Where a replay stands; None for a live feed."""
        return None

    def snapshot(
        self,
        now: float | None = None,
        *,
        window_s: int | None = None,
        windows: tuple[int, ...] = (),
        requests_for: str | None = None,
        timeline_for: tuple[str, str] | None = None,
    ) -> Snapshot:
        """``requests_for``: the source whose request table to copy out; ``timeline_for``: the
        (source, rid) whose steps to copy out."""
        now = self._clock() if now is None else now
        with self._lock:
            sub = self._sub
            if sub is None:
                transport = Transport({}, {ep: "closed" for ep in self.endpoints})
            else:
                transport = Transport(
                    sources={k: c.loss() for k, c in list(sub.sources.items())},
                    endpoints=dict(sub.endpoints),
                    malformed=sub.malformed,
                    last_malformed=sub.last_malformed,
                    unknown_kinds=sub.unknown_kinds,
                    frames=sub.frames,
                    bytes=sub.bytes,
                    evicted_sources=sub.evicted_sources,
                )
            return take_snapshot(
                self.book,
                self.diagnoses,
                now,
                transport,
                stale_after_s=self.stale_after_s,
                window_s=window_s,
                windows=windows,
                baseline_tok_s=self.diagnoser.baseline_tok_s,
                requests_for=requests_for,
                timeline_for=timeline_for,
                acc_mark_gap=self.diagnoser.thresholds.acc_mark_gap,
            )
