"""One thread that owns a Subscriber, folds what it receives into an evidence book and keeps the
findings fresh: the monitor's feed (``tui/feed.py``) and the exporter's (``tracer/export/feed.py``)
are this worker with their own receive rhythm (``_pump``) and extras.

Locking: frames are received and decoded outside the lock and folded into the book under it. The
findings engine runs on the worker too, outside the lock (the worker is the book's only writer), at
most once a second per source, and its results are swapped in under it. Readers (a snapshot, a
scrape) take the lock only to copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from eagle3_top.tracer.reader.endpoints_file import Change, EndpointsFile
from eagle3_top.tracer.reader.subscriber import Subscriber

from .diagnosis import Diagnoser, Diagnosis
from .evidence import EvidenceBook
from .manifest import Manifest
from .thresholds import THRESHOLDS, Thresholds

log = logging.getLogger("eagle3_top.tracer.analysis.book_worker")

POLL_MS = 50  # how long a receive waits for a first frame


class BookWorker:
    """Subscribe to ``endpoints`` on a worker thread and fold what arrives into ``book``."""

    thread_name = "eagle3-top-book"
    book: EvidenceBook
    diagnoser: Diagnoser

    def __init__(
        self,
        endpoints: list[str],
        *,
        book: EvidenceBook,
        manifest: Manifest | None = None,
        subscriber_factory: Callable[[list[str]], Any] | None = None,
        stale_after_s: float = THRESHOLDS.stale_after_s,
        thresholds: Thresholds = THRESHOLDS,
        baseline_tok_s: float | None = None,
        poll_ms: int = POLL_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoints = list(endpoints)
        self.book = book
        self.diagnoser = Diagnoser(manifest, baseline_tok_s, thresholds)
        self.diagnoses: dict[str, Diagnosis] = {}
        self.stale_after_s = stale_after_s
        self._factory = subscriber_factory or (lambda eps: Subscriber(eps))
        self._poll_ms = poll_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._sub: Any = None  # the frame source the worker made (a Subscriber, or a replay's ledger)
        self._thread: threading.Thread | None = None
        self._file: EndpointsFile | None = None
        self._fixed: set[str] = set()
        self.batches = 0
        self.error: str | None = None  # why the worker stopped (or never started), and the like

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> BookWorker:
        """Subscribes on the worker thread; returns once it has (or has failed: ``error``)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
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
        changes; the endpoints given to the worker stay whatever the file says."""
        self._file = file
        self._fixed = set(self.endpoints)
        self.endpoints += [ep for ep in file.endpoints if ep not in self._fixed]

    # -- worker ----------------------------------------------------------------------------------

    def _open(self) -> Any:
        """The frame source, made on the worker (zmq sockets live and die in their thread)."""
        return self._factory(self.endpoints)

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
                self._before_pump()
                self._follow_file(sub)
                self._pump(sub)
                self._after_pump()
                self._judge()
        except Exception as exc:  # keep the reader alive and say why the numbers stopped
            self.error = f"receive worker stopped: {type(exc).__name__}: {exc}"
            log.exception("%s stopped", self.thread_name)
        finally:
            with self._lock:
                self._sub = None
            try:
                sub.close()
            except Exception:
                pass
            self._closed()

    def _pump(self, sub: Any) -> None:
        """Receive, decode and fold one round (the subclass's rhythm)."""
        raise NotImplementedError

    def _judge(self) -> None:
        """The findings of the sources that are due, judged outside the lock, swapped in under it."""
        fresh, gone = self.diagnoser.run(self.book, self._clock(), self._settled())
        if fresh or gone:
            with self._lock:
                self.diagnoses.update(fresh)
                for key in gone:
                    self.diagnoses.pop(key, None)
        self._judged()

    def _follow_file(self, sub: Any) -> None:
        """Apply the endpoints file's changes, on the worker: it owns the socket."""
        if self._file is None:
            return
        change = self._file.poll()
        if change is not None:
            with self._lock:  # readers copy sub.endpoints
                for ep in change.added:
                    if ep not in sub.endpoints:
                        sub.add_endpoint(ep)
                for ep in change.removed:
                    if ep not in self._fixed:
                        sub.remove_endpoint(ep)
                self.endpoints = list(sub.endpoints)
        self._file_changed(change)

    # -- what a subclass may add ---------------------------------------------------------------------

    def _before_pump(self) -> None:
        """Each round, before receiving."""

    def _after_pump(self) -> None:
        """Each round, after folding."""

    def _file_changed(self, change: Change | None) -> None:
        """The endpoints file's news, None when nothing changed (once per round with a file)."""
        if change is not None:
            log.log(logging.INFO if change.fine else logging.WARNING, "%s", change.summary())

    def _settled(self) -> bool:
        """True when the evidence just stopped changing and the findings must catch up at once."""
        return False

    def _judged(self) -> None:
        """The findings engine just ran."""

    def _closed(self) -> None:
        """The worker is ending."""
