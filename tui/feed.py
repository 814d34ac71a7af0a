"""The receive worker: one thread owns the Subscriber, folds every frame into the evidence book and
keeps the findings fresh.

The UI never sees individual events. It pulls an immutable ``Snapshot`` on its own timer (a few Hz),
so however fast the stream runs, the UI does a fixed amount of work per frame drawn; the worker
aggregates (the toolong pattern: backpressure by aggregation, not by queueing messages).

Locking: the worker receives and decodes frames *outside* the lock, then folds a whole batch into
the book under it. The findings engine runs on the worker too, outside the lock (the worker is the
book's only writer), and its results are swapped in under it. ``snapshot()`` takes the lock for the
few hundred microseconds it needs to copy counters out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.requests import INTERNAL_PREFIXES
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS, Thresholds
from eagle3_top.tracer.endpoints_file import Change, EndpointsFile
from eagle3_top.tracer.ledger import FrameLedger
from eagle3_top.tracer.replay import Position
from eagle3_top.tracer.subscriber import Subscriber

from .diagnosis import Diagnoser, Diagnosis
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


class Feed:
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
        self.endpoints = list(endpoints)
        self.book = book or EvidenceBook(manifest=manifest, internal_prefixes=internal_prefixes)
        self.diagnoser = Diagnoser(manifest, baseline_tok_s, thresholds)
        self.diagnoses: dict[str, Diagnosis] = {}
        self.stale_after_s = stale_after_s
        self._factory = subscriber_factory or (lambda eps: Subscriber(eps))
        self._poll_ms = poll_ms
        self._max_batch = max_batch
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._sub: FrameLedger | None = None
        self._thread: threading.Thread | None = None
        # set if the worker died or the endpoints file has something to fix; shown by the UI in red
        self.error: str | None = None
        # the endpoints file's news ("+2 −1"): shown for FILE_NEWS_S, not as an error
        self.notice: str | None = None
        self._file: EndpointsFile | None = None
        self._fixed: set[str] = set()
        self._file_error = False  # ``error`` is the file's: cleared once the file is fine again
        self._news_until = 0.0
        self.recording = FeedRecording(self.endpoints)
        self.batches = 0
        self._next_fold = 0.0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Feed:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="eagle3-top-feed", daemon=True)
            self._thread.start()
            self._ready.wait(5.0)
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def follow_endpoints_file(self, file: EndpointsFile) -> None:
        """Before ``start``: connect the endpoints the (loaded) file names too, and follow its
        changes; the endpoints given to the feed stay whatever the file says."""
        self._file = file
        self._fixed = set(self.endpoints)
        self.endpoints += [ep for ep in file.endpoints if ep not in self._fixed]
        if file.bad:
            self.error, self._file_error = Change(file.path, bad=file.bad).summary(), True

    # -- worker ----------------------------------------------------------------------------------

    def _open(self) -> FrameLedger:
        """The frame source, made on the worker (zmq sockets live and die in their thread)."""
        return self._factory(self.endpoints)

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

    def _run(self) -> None:
        try:
            sub = self._open()
        except Exception as exc:
            self.error = f"cannot subscribe: {type(exc).__name__}: {exc}"
            self._ready.set()
            return
        self._sub = sub
        self._ready.set()
        try:
            while not self._stop.is_set():
                self.recording.service()
                self._follow_file(sub)
                self._pump(sub)
                self._fold_requests()
                fresh, gone = self.diagnoser.run(self.book, self._clock(), self._settled())
                if fresh or gone:
                    with self._lock:
                        self.diagnoses.update(fresh)
                        for key in gone:
                            self.diagnoses.pop(key, None)
                self._judged()
        except Exception as exc:  # keep the UI alive and say why the numbers stopped
            self.error = f"receive worker stopped: {type(exc).__name__}: {exc}"
            log.exception("feed worker stopped")
        finally:
            with self._lock:
                self._sub = None
            try:
                sub.close()
            except Exception:
                pass
            self._closed()

    def _follow_file(self, sub: FrameLedger) -> None:
        """Apply the endpoints file's changes, on the worker: it owns the socket."""
        if self._file is None:
            return
        change = self._file.poll()
        now = time.monotonic()
        if change is None:
            if self.notice is not None and now > self._news_until:
                self.notice = None  # shown long enough
            return
        sub = cast(Subscriber, sub)
        with self._lock:  # snapshot() copies sub.endpoints
            for ep in change.added:
                if ep not in sub.endpoints:
                    sub.add_endpoint(ep)
            for ep in change.removed:
                if ep not in self._fixed:
                    sub.remove_endpoint(ep)
            self.endpoints = list(sub.endpoints)
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

    def _settled(self) -> bool:
        """True when the evidence just stopped changing and the findings must catch up at once
        (never live: new frames keep coming, and the findings engine runs on its own period)."""
        return False

    def _judged(self) -> None:
        """The findings engine just ran on the worker (a replay marks where it caught up)."""

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
