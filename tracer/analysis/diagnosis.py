"""The findings engine run over a live book: each source re-judged at most once a second (and at
once when its hello changes), on the thread that feeds the book, never under a lock a reader takes.
The monitor and the Prometheus exporter use it."""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3_top.tracer.schema import Hello

from .diagnose import judge
from .evidence import EvidenceBook
from .findings import Finding
from .layer_map import SlotRow
from .manifest import Manifest
from .thresholds import THRESHOLDS, Thresholds

FINDINGS_EVERY_S = 1.0


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...] = ()  # errors first
    layer_rows: tuple[SlotRow, ...] = ()  # with a manifest only
    error: str | None = None  # the engine itself failed on this evidence


@dataclass
class _Due:
    at: float = float("-inf")
    hello: Hello | None = None


@dataclass
class Diagnoser:
    manifest: Manifest | None = None
    baseline_tok_s: float | None = None  # the server's tok/s without speculation, if the user gave it
    thresholds: Thresholds = THRESHOLDS
    every_s: float = FINDINGS_EVERY_S
    _due: dict[str, _Due] = field(default_factory=dict)
    _evictions_seen: int = 0

    def run(
        self, book: EvidenceBook, now: float, force: bool = False
    ) -> tuple[dict[str, Diagnosis], list[str]]:
        """Fresh diagnoses of the sources that are due, and the sources the book has evicted since
        the last call (their diagnoses must go too: a publisher inventing sources must not grow
        memory). Call from the thread that feeds ``book``: it reads the evidence while nothing
        else writes it. ``force``: every source now, not only the due ones (a replay that stopped
        on a frame, whose clock will not move on to make them due)."""
        out: dict[str, Diagnosis] = {}
        for key, st in list(book.sources.items()):
            if st.hello is None:
                continue
            due = self._due.get(key)
            if due is None:
                due = self._due[key] = _Due()
            elif not force and due.hello is st.hello and now - due.at < self.every_s:
                continue
            due.at, due.hello = now, st.hello
            try:
                baseline = self.baseline_tok_s if st.hello.speculates else None  # nothing to compare
                j = judge(st, self.manifest, self.thresholds, now=now, baseline_tok_s=baseline)
                out[key] = Diagnosis(j.findings, j.layer_rows)
            except Exception as exc:  # odd evidence costs this source's findings, not the monitor
                out[key] = Diagnosis(error=f"diagnosis failed: {type(exc).__name__}: {exc}"[:200])
        gone: list[str] = []
        if book.dropped_sources != self._evictions_seen:
            self._evictions_seen = book.dropped_sources
            gone = [key for key in self._due if key not in book.sources]
            for key in gone:
                del self._due[key]
        return out, gone
