"""What ``eagle3-top export`` serves, copied out of the feed in one go: per source, the cumulative
tallies of the evidence book, its tracer's health counters, the transport's sequence counters,
its wiring, its findings and how far behind its fold is. Taken under the feed's lock (a few array
copies per source, nothing per event); the metric families are built from the copy, outside it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from eagle3_top.tracer.analysis.diagnosis import Diagnosis
from eagle3_top.tracer.analysis.evidence import EvidenceBook, SourceEvidence
from eagle3_top.tracer.reader.eviction import Evictions
from eagle3_top.tracer.reader.ledger import FrameLedger, SourceCounters
from eagle3_top.tracer.schema import Health, Hello

from .lag import FoldLag


@dataclass(frozen=True)
class SourceFigures:
    key: str  # host:pid:rRANK
    host: str
    rank: str  # the number alone
    engine: str
    evidence: SourceEvidence  # identity only, outside the lock: a new object is a book that started over
    counts: np.ndarray  # request-steps by accepted drafts (acceptance.counts)
    proposed: np.ndarray  # request-steps whose draft proposed position i
    verify_steps: int
    drafted: int  # draft tokens proposed
    accepted: int  # draft tokens accepted
    committed: int  # accept lengths summed (accepted + the bonus token per request-step)
    malformed: int  # its events that failed the schema
    hello: Hello | None
    health: Health | None
    transport: SourceCounters | None  # identity only: a new object is a ledger that started over
    missed: int  # holes in seq, whoever dropped them (the tracer or the way)
    receive_dropped: int  # of them, sent by the tracer and dropped on the way (a full queue, the link)
    restarts: int  # new publishers under this source id
    silent_s: float  # since the fold of its newest event: "up" while under stale_after_s
    lag_s: float  # how long its newest folded event waited before its fold (``lag``)
    age_s: float  # since its newest folded event arrived: silent_s + lag_s
    findings: Mapping[tuple[str, str], int]  # (code, severity) -> how many are raised now


@dataclass(frozen=True)
class Figures:
    sources: tuple[SourceFigures, ...]
    endpoints: Mapping[str, str]  # endpoint -> state (connected, down (retrying), ...)
    malformed_frames: int  # frames that failed to decode, whatever source they named
    receiving: bool = True  # the receive worker runs
    evictions: Evictions = field(default_factory=Evictions)  # sources the book forgot, by kind


def copy_figures(
    book: EvidenceBook,
    diagnoses: Mapping[str, Diagnosis],
    ledger: FrameLedger | None,
    lag: FoldLag,
    now: float,
    receiving: bool = True,
) -> Figures:
    """The caller holds the feed's lock."""
    transport = ledger.sources if ledger is not None else {}
    out = []
    for key, st in book.sources.items():
        acc = st.acceptance
        host, _, rank = st.host_pid_rank
        tc = transport.get(key)
        diag = diagnoses.get(key)
        silent, behind = max(0.0, now - st.last_seen), lag.lag(key)
        out.append(
            SourceFigures(
                key=key,
                host=host,
                rank=rank[1:] if rank.startswith("r") else rank,
                engine=st.engine,
                evidence=st,
                counts=acc.counts.copy(),
                proposed=acc.proposed.copy(),
                verify_steps=st.steps,
                drafted=acc.drafts_proposed,
                accepted=acc.tokens_accepted,
                committed=acc.tokens,
                malformed=st.malformed,
                hello=st.hello,
                health=st.health,
                transport=tc,
                missed=tc.gaps if tc is not None else 0,
                receive_dropped=tc.slow_consumer if tc is not None else 0,
                restarts=tc.restarts if tc is not None else 0,
                silent_s=silent,
                lag_s=behind,
                age_s=silent + behind,
                findings=Counter((f.code, f.severity) for f in diag.findings) if diag else {},
            )
        )
    return Figures(
        tuple(out),
        dict(ledger.endpoints) if ledger is not None else {},
        ledger.malformed if ledger is not None else 0,
        receiving,
        replace(book.evictions),
    )
