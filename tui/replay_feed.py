"""The feed of ``eagle3-top --replay``: the live feed's worker and book, fed from a recording.

Frames are decoded by the same ledger and folded into the same evidence book as live, each batch at
the receive time the recorder stamped on it, so the book, the findings and every figure derived
from them come out as the live monitor had them at that moment of the session.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from itertools import groupby

from eagle3_top.tracer.analysis.diagnosis import Diagnoser
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.requests import INTERNAL_PREFIXES
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS, Thresholds
from eagle3_top.tracer.reader.ledger import FrameLedger
from eagle3_top.tracer.reader.replay import Position, Timeline

from .feed import Feed
from .snapshot import STALE_AFTER_S

# How often a followed file is checked for new chunks (the recorder closes one a second).
FOLLOW_POLL_S = 0.25
# A copy of the book every so many frames: a seek back folds at most this many again (~0.1 s of a
# busy server's frames on one core) instead of everything since the first frame. A copy costs
# well under a millisecond per source.
CHECKPOINT_EVERY = 2048
# Past this many, every other checkpoint goes and the spacing doubles: memory stays bounded on a
# recording of days and many sources.
MAX_CHECKPOINTS = 64


class ReplayFeed(Feed):
    book: EvidenceBook  # replaced whole on a seek (``_restore``)
    diagnoser: Diagnoser

    def __init__(
        self,
        timeline: Timeline,
        *,
        manifest: Manifest | None = None,
        stale_after_s: float = STALE_AFTER_S,
        poll_ms: int = 50,
        max_batch: int = 2048,
        checkpoint_every: int = CHECKPOINT_EVERY,
        baseline_tok_s: float | None = None,
        thresholds: Thresholds = THRESHOLDS,
        internal_prefixes: Sequence[str] = INTERNAL_PREFIXES,
    ) -> None:
        super().__init__(
            [],
            manifest=manifest,
            stale_after_s=stale_after_s,
            poll_ms=poll_ms,
            max_batch=max_batch,
            clock=timeline.now,
            baseline_tok_s=baseline_tok_s,
            thresholds=thresholds,
            internal_prefixes=internal_prefixes,
        )
        self.timeline = timeline
        self._manifest = manifest
        self._next_file_poll = 0.0
        self._moved = False  # frames were folded in since the findings last ran
        self._idle_at: int | None = None  # the timeline revision the worker found nothing to do at
        self._caught_up_at: int | None = None  # ... and the findings had run on everything by then
        self._every = checkpoint_every
        self._saved: dict[int, tuple[EvidenceBook, FrameLedger]] = {}  # position -> state after it

    def position(self) -> Position:
        return self.timeline.position()

    def _open(self) -> FrameLedger:
        return FrameLedger()

    def _pump(self, ledger: FrameLedger) -> None:
        tl = self.timeline
        if tl.follow and time.monotonic() >= self._next_file_poll:
            self._next_file_poll = time.monotonic() + FOLLOW_POLL_S
            tl.poll_file()
        batch = tl.take(self._max_batch)
        self._idle_at = None
        if batch.rewind:  # a jump: the aggregates cannot be un-added, so resume from a copy
            if batch.start and batch.start not in self._saved:  # thinned out since the seek
                tl.restart_from(
                    max((p for p in self._saved if p < batch.start), default=0),
                    batch.start + len(batch.frames),
                )
                return
            self._restore(batch.start)
        ledger = self._sub or ledger  # the restored one
        if not batch.frames:
            self._idle_at = batch.revision
            self._stop.wait(self._poll_ms / 1000)
            return
        # One ingest per receive time: the recorder stamped one per batch its socket had queued.
        groups = [
            (t / 1e9, [ev for ev in map(ledger.decode_frame, (f.data for f in grp)) if ev is not None])
            for t, grp in groupby(batch.frames, key=lambda f: f.log_time_ns)
        ]
        with self._lock:
            for now, events in groups:
                self.book.ingest(events, now, ledger.count_malformed)
            self.batches += 1
        self._moved = True
        self._checkpoint(batch.start + len(batch.frames), ledger)

    def run_to_end(self) -> None:
        """Fold the whole recording in on the calling thread (``--once --replay``: no worker, no
        screen), as the worker would at ``max`` speed; the timeline must not be following."""
        ledger = self._sub = FrameLedger()
        self.timeline.set_speed(None)
        while not self.timeline.position().at_end:
            self._pump(self._sub or ledger)

    def _checkpoint(self, position: int, ledger: FrameLedger) -> None:
        last = max(self._saved, default=0)
        if position - last < self._every:
            return
        # Only this thread writes the book and the ledger: copying them needs no lock. The
        # manifest is shared, never copied; so are the events and records decoded from the wire
        # (schema.Shared): what a frame holds cannot make a copy fail or grow.
        memo = {} if self._manifest is None else {id(self._manifest): self._manifest}
        self._saved[position] = copy.deepcopy((self.book, ledger), memo)
        if len(self._saved) > MAX_CHECKPOINTS:
            self._saved = {p: st for i, (p, st) in enumerate(sorted(self._saved.items())) if i % 2}
            self._every *= 2
            # a seek made before this sees a position no longer held: _pump sends it back further
            self.timeline.drop_checkpoints(list(self._saved))
        self.timeline.add_checkpoint(position)

    def _restore(self, position: int) -> None:
        """The state as it stood after the first ``position`` frames: a copy of the checkpoint
        (it may be resumed from again), or empty at 0."""
        saved = self._saved.get(position)
        book: EvidenceBook
        ledger: FrameLedger
        if saved is None:
            prefixes = self.book.internal_prefixes
            book, ledger = EvidenceBook(manifest=self._manifest, internal_prefixes=prefixes), FrameLedger()
        else:
            memo = {} if self._manifest is None else {id(self._manifest): self._manifest}
            book, ledger = copy.deepcopy(saved, memo)
        with self._lock:
            self.book = book
            self._sub = ledger
            d = self.diagnoser
            self.diagnoser = Diagnoser(self._manifest, d.baseline_tok_s, d.thresholds)
            self.diagnoses.clear()

    def caught_up(self) -> bool:
        """True when every frame the timeline has handed out is in the book and judged, and
        nothing is due: the screen and the findings show the recording as it stands at the cursor."""
        at = self._caught_up_at
        return at is not None and at == self.timeline.position().revision

    def _judged(self) -> None:
        self._caught_up_at = self._idle_at if not self._moved else None

    def _settled(self) -> bool:
        # Paused, stepped, seeked or at the end, the clock stands still and would never make the
        # findings due again: run them on the evidence as it now stands, once.
        if not self._moved:
            return False
        pos = self.timeline.position()
        if pos.playing and not pos.at_end:
            return False
        self._moved = False
        return True
