"""What the UI draws: immutable snapshots of the evidence book, taken a few times a second.

Pure Python + numpy (no textual import), so it can be tested and benchmarked on its own. Only the
latest step event of each source is kept; the few proposal rows on screen are materialised here,
at snapshot time, not per event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from eagle3_top.tracer.analysis.acceptance import AcceptanceSummary
from eagle3_top.tracer.analysis.diagnose import expected_accept_length
from eagle3_top.tracer.analysis.diagnosis import Diagnosis
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.findings import Finding
from eagle3_top.tracer.analysis.layer_map import SlotRow
from eagle3_top.tracer.analysis.payoff import Payoff, payoff_now
from eagle3_top.tracer.analysis.probe_compare import ProbeComparison
from eagle3_top.tracer.analysis.requests import RequestTable
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS
from eagle3_top.tracer.reader.eviction import Evictions
from eagle3_top.tracer.reader.subscriber import Loss
from eagle3_top.tracer.schema import AuxSample, DecodeError, Event, Health, Hello, step_view

from .proposal_rows import PROPOSAL_ROWS, ProposalRow, proposal_rows
from .timeline_data import RequestTimeline, request_timeline

STALE_AFTER_S = THRESHOLDS.stale_after_s  # the default; a config file's [thresholds] changes it
# Silent this long (a publisher sends health every second), a source is shown as dead; the book
# forgets it only when it needs the room.
DEAD_AFTER_S = 30.0
_NO_DIAGNOSIS = Diagnosis()
# The acceptance windows the monitor switches between (w): since start, the last minute, the last
# ten seconds. At most the acceptance history's 120 s.
WINDOWS: tuple[int | None, ...] = (None, 60, 10)


def window_label(window_s: int | None) -> str:
    return "since start" if window_s is None else f"last {window_s} s"


@dataclass(frozen=True)
class SourceSnapshot:
    key: str  # host:pid:rN
    host: str
    pid: str
    rank: str
    engine: str
    name: str  # host:pid:rank + engine, for the table
    hello: Hello | None
    health: Health | None
    aux: AuxSample | None
    summary: AcceptanceSummary
    last_batch: int
    last_n: int
    last_topk: int
    stale: bool
    age_s: float  # seconds since the last event from this source
    received: int  # events received (transport counter)
    missed: int  # sequence holes (transport counter)
    steps: int
    step_errors: int
    hellos: int
    auxes: int
    probes: int
    loss: Loss = Loss()  # the holes by kind: transit, tracer drops, restarts, late join
    malformed: int = 0  # its events that failed the schema
    last_malformed: str | None = None
    dead: bool = False  # silent past DEAD_AFTER_S, or its publisher said goodbye
    findings: tuple[Finding, ...] = ()  # errors first
    findings_error: str | None = None
    layer_rows: tuple[SlotRow, ...] = ()  # with a manifest only
    probe: ProbeComparison | None = None  # the latest probe against the manifest
    probe_note: str | None = None  # why the latest probe event could not be compared
    window_s: int | None = None  # what ``summary`` covers: the last so many seconds, or since start
    training_acc: tuple[float, ...] = ()  # acc_i: the manifest's training metrics, else the draft's claims
    windows: tuple[tuple[int, AcceptanceSummary], ...] = ()  # other windows, when asked for (--json)
    payoff: Payoff | None = None  # against the baseline tok/s the user gave, over the rate window
    requests: RequestTable | None = None  # only for the source whose requests are on screen
    acc_mark_gap: float = THRESHOLDS.acc_mark_gap  # a served rate this far below acc_i is drawn red
    expected_accept_length: float | None = None  # training's, on this server's draft steps
    # The latest step as received: viewed (checked in full, rids decoded) only when something draws
    # its proposals, i.e. for the one source on screen, not for each of a fleet's 64 every refresh.
    step_event: Event | None = None
    proposal_limit: int = PROPOSAL_ROWS

    @cached_property
    def proposals(self) -> tuple[ProposalRow, ...]:
        """The first rows of the latest step, ready to draw; () before any step."""
        if self.step_event is None:
            return ()
        try:
            return proposal_rows(step_view(self.step_event), self.proposal_limit)
        except DecodeError:
            return ()

    @property
    def speculates(self) -> bool:
        """False for a source whose hello says it decodes without speculation (a baseline run)."""
        return self.hello is None or self.hello.speculates


@dataclass(frozen=True)
class Snapshot:
    now: float
    sources: tuple[SourceSnapshot, ...]
    endpoints: tuple[tuple[str, str], ...] = ()
    malformed: int = 0
    last_malformed: str | None = None
    unknown_kinds: int = 0
    frames: int = 0
    bytes: int = 0
    events: int = 0
    evicted_sources: int = 0  # forgotten to bound memory (more sources than the monitor holds)
    evictions: Evictions = field(default_factory=Evictions)  # the book's, by kind
    timeline: RequestTimeline | None = None  # the request whose timeline is on screen

    def source(self, key: str | None) -> SourceSnapshot | None:
        for s in self.sources:
            if s.key == key:
                return s
        return None


@dataclass(frozen=True)
class Transport:
    """The subscriber's side of the picture, copied out with the snapshot."""

    sources: Mapping[str, Loss]
    endpoints: Mapping[str, str]
    malformed: int = 0
    last_malformed: str | None = None
    unknown_kinds: int = 0
    frames: int = 0
    bytes: int = 0
    evicted_sources: int = 0


def _training_acc(book: EvidenceBook, hello: Hello | None) -> tuple[float, ...]:
    if book.manifest is not None and book.manifest.training is not None:
        return tuple(book.manifest.training_acc)
    if hello is not None and hello.claims is not None:
        return tuple(hello.claims.acc or ())
    return ()


def take_snapshot(
    book: EvidenceBook,
    diagnoses: Mapping[str, Diagnosis],
    now: float,
    transport: Transport | None = None,
    *,
    stale_after_s: float = STALE_AFTER_S,
    proposals: int = PROPOSAL_ROWS,
    window_s: int | None = None,
    windows: tuple[int, ...] = (),
    baseline_tok_s: float | None = None,
    requests_for: str | None = None,
    timeline_for: tuple[str, str] | None = None,
    acc_mark_gap: float = THRESHOLDS.acc_mark_gap,
) -> Snapshot:
    """An immutable view of every source; the caller holds the book's lock. ``window_s``: the
    acceptance figures over the last so many seconds instead of since start; ``windows``: more
    summaries over those windows, for a caller that prints them all."""
    transport = transport or Transport({}, {})
    out = []
    for key, st in book.sources.items():
        host, pid, rank = st.host_pid_rank
        loss = transport.sources.get(key) or Loss(received=st.events)
        age = max(0.0, now - st.last_seen)
        step = st.last_step_event
        body = step.body if step is not None else {}  # shape-checked when it was folded in
        diag = diagnoses.get(key) or _NO_DIAGNOSIS
        summary = st.acceptance.summary(now, window_s)
        speculates = st.hello is None or st.hello.speculates  # a baseline run is no speed-up of itself
        out.append(
            SourceSnapshot(
                key=key,
                host=host,
                pid=pid,
                rank=rank,
                engine=st.engine,
                name=f"{key} {st.engine}",
                hello=st.hello,
                health=st.health,
                aux=st.aux,
                summary=summary,
                step_event=step,
                proposal_limit=proposals,
                last_batch=body.get("batch", 0),
                last_n=body.get("n", 0),
                last_topk=body.get("topk", 1) if step is not None else 0,
                stale=age > stale_after_s,
                age_s=age,
                received=loss.received,
                missed=loss.gaps,
                steps=st.steps,
                loss=loss,
                malformed=st.malformed,
                last_malformed=st.last_malformed,
                dead=age > DEAD_AFTER_S or (st.health is not None and st.health.final),
                step_errors=st.step_errors,
                hellos=st.hellos,
                auxes=st.auxes,
                probes=st.probes,
                findings=diag.findings,
                findings_error=diag.error,
                layer_rows=diag.layer_rows,
                probe=st.probe,
                probe_note=st.probe_note,
                window_s=window_s,
                training_acc=_training_acc(book, st.hello),
                windows=tuple((w, st.acceptance.summary(now, w)) for w in windows),
                payoff=payoff_now(st.acceptance, now, baseline_tok_s) if speculates else None,
                requests=st.requests.table() if key == requests_for else None,
                acc_mark_gap=acc_mark_gap,
                expected_accept_length=(
                    expected_accept_length(st.hello, book.manifest)[0] if st.hello is not None else None
                ),
            )
        )
    return Snapshot(
        now=now,
        sources=tuple(out),
        endpoints=tuple(transport.endpoints.items()),
        malformed=transport.malformed,
        last_malformed=transport.last_malformed,
        unknown_kinds=transport.unknown_kinds,
        frames=transport.frames,
        bytes=transport.bytes,
        events=book.events,
        evicted_sources=max(transport.evicted_sources, book.dropped_sources),
        evictions=replace(book.evictions),
        timeline=_timeline(book, timeline_for),
    )


def _timeline(book: EvidenceBook, which: tuple[str, str] | None) -> RequestTimeline | None:
    if which is None:
        return None
    st = book.sources.get(which[0])
    return None if st is None else request_timeline(which[0], st.requests, which[1])
