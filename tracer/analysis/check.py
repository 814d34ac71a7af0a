"""Headless verdict for a deploy pipeline: watch a stream until the evidence is in, then judge.

A gate must never pass on evidence it did not see, so the verdict has four outcomes (the exit
codes of ``eagle3-top check``):

- ``ok``: every source showed its hello and at least ``min_steps`` verify steps (and, with a
  manifest, enough aux rows for the layer checks; with an expected accept length, from the
  manifest or the draft's own claims, ``min_request_steps`` request-steps), and nothing is wrong;
- ``findings``: an error finding, a crashed engine among them; reported the moment it is certain;
- ``partial``: no error, but some source fell short of that evidence (idle, gone, or sending
  frames we could not read): what it showed and what it lacked are listed;
- ``no stream`` (``NoStream``): no hello from anywhere: a connection problem, not a verdict.

Structural findings need only the hello; statistical ones need ``MIN_AUX_ROWS`` aux rows and
``MIN_REQUEST_STEPS`` request-steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import TYPE_CHECKING, Any

from eagle3_top.tracer.analysis.diagnose import MIN_AUX_ROWS, diagnose, expected_accept_length
from eagle3_top.tracer.analysis.evidence import EvidenceBook, OnMalformed, SourceEvidence
from eagle3_top.tracer.analysis.findings import Finding, has_errors
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS, Thresholds
from eagle3_top.tracer.reader.eviction import Evictions
from eagle3_top.tracer.reader.ledger import FrameLedger
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import Event

if TYPE_CHECKING:
    # only for --replay, which hands the frames in: a live check runs where mcap is not installed
    from eagle3_top.tracer.reader.recording import RecordedFrame, RecordingReport
    from eagle3_top.tracer.transport.curve import CurveClient

OK, FINDINGS, PARTIAL = "ok", "findings", "partial"
# A publisher sends a health event every second: this long without any event, a source is gone.
GONE_AFTER_S = 5.0
# A crash reported by a source whose hello has not come yet (check subscribed after the crash: the
# engine lingers, its publisher sends the hello on subscribe and every 5 s) is judged once the hello
# is in or after this long: the hello carries the wiring that often explains the crash.
CRASH_HELLO_GRACE_S = 5.5


class NoStream(RuntimeError):
    """Nothing usable arrived: a connection problem, not a verdict."""


@dataclass
class SourceReport:
    """What one source showed, and what it lacked for a full verdict."""

    key: str
    hello: bool
    steps: int
    request_steps: int
    aux_rows: int
    malformed: int
    accept_length: float | None
    unconditional: list[float]  # P(position i accepted), i = 1..
    conditional: list[float]  # P(i accepted | i - 1 accepted): comparable with training's acc_i
    expected_accept_length: float | None
    expected_by: str
    missing: list[str] = field(default_factory=list)
    gone: str | None = None  # how it went away, when it did
    last_malformed: str | None = None

    @property
    def complete(self) -> bool:
        return not self.missing

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["complete"] = self.complete
        return out


@dataclass
class CheckResult:
    findings: list[Finding]
    sources: dict[str, SourceEvidence]
    reports: list[SourceReport]
    waited_s: float
    undecodable: int = 0  # frames that named no source (not msgpack, no envelope)
    last_undecodable: str | None = None
    notes: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # evidence known to be missing (a damaged recording)
    unheard: list[str] = field(default_factory=list)  # endpoints named that no source was heard through
    read_whole: bool = False  # a replay read the recording to its end
    evictions: Evictions = field(default_factory=Evictions)  # sources the book forgot, by kind

    @property
    def complete(self) -> bool:
        return all(r.complete for r in self.reports)

    @property
    def verdict(self) -> str:
        if has_errors(self.findings):
            return FINDINGS
        return (
            OK
            if self.complete
            and not self.undecodable
            and not self.lost
            and not self.unheard
            # a real engine's evidence forgotten: what was judged is not all it showed
            and not self.evictions.proven
            else PARTIAL
        )

    def note_recording(self, report: RecordingReport) -> None:
        """A hole in the middle of a recording (a bad chunk, damaged bytes stepped over, a summary
        that counts messages the chunks no longer hold) is evidence not seen: partial. A cut-off
        end (a recorder killed) only shortens the recording, and is a note, when the judging got
        there."""
        lost = [f"bad chunk at byte {o} skipped: {why}" for o, why in report.bad_chunks]
        lost += [f"{n} bytes skipped at byte {o}: damaged" for o, n in report.skipped]
        lost += report.index_mismatch
        self.lost.extend(lost)
        if self.read_whole:
            self.notes.extend(f"recording: {line}" for line in report.describe() if line not in lost)


@dataclass(frozen=True)
class Enough:
    """What counts as enough evidence per source."""

    steps: int = 50  # stop watching a source once it showed this many verify steps
    min_steps: int = 50  # fewer than this is partial evidence
    manifest: Manifest | None = None
    thresholds: Thresholds = THRESHOLDS  # the findings' margins (a config file's [thresholds])

    def missing(self, ev: SourceEvidence) -> list[str]:
        out = []
        if ev.hello is None:
            out.append("no hello (the server's wiring is unknown)")
        if ev.steps < self.min_steps:
            out.append(f"verify steps: {ev.steps} seen, {self.min_steps} asked for (--min-steps)")
        elif self.min_steps and not ev.acceptance.request_steps and (ev.hello is None or ev.hello.speculates):
            # steps of batch 0 carry no request: no acceptance was seen, whatever their number
            out.append(
                f"request-steps: none in its {ev.steps} verify steps (each of batch 0): no acceptance seen"
            )
        elif (
            ev.acceptance.request_steps < self.thresholds.min_request_steps
            and self.expected(ev)[0] is not None
        ):
            # Part of what a source must show, not only of its report: were it left out here, done()
            # would stop watching a busy server as soon as the steps and aux rows were in, and then
            # call the verdict partial for want of request-steps that were still streaming in (a
            # loaded box, where aux rows outrun request-steps, stopped check 4.7 s into a workload
            # with 91 of its ~390 request-steps per replica seen).
            out.append(
                f"{ev.acceptance.request_steps} of {self.thresholds.min_request_steps} request-steps "
                "(the accept-length check against training)"
            )
        if (
            self.manifest is not None
            and ev.aux_merged.rows < MIN_AUX_ROWS
            and (ev.hello is None or ev.hello.captures_aux())
        ):
            out.append(f"aux rows: {ev.aux_merged.rows} seen, {MIN_AUX_ROWS} needed by the layer-map checks")
        if ev.malformed and not ev.steps:
            out.append(f"its {ev.malformed} frame(s) failed the schema ({ev.last_malformed})")
        return out

    def expected(self, ev: SourceEvidence) -> tuple[float | None, str]:
        """The accept length this source's draft should reach, and who says so; none without a
        hello or a draft (nothing to compare acceptance with, so no request-steps to wait for)."""
        if ev.hello is None or not ev.hello.speculates:
            return None, ""
        return expected_accept_length(ev.hello, self.manifest)

    def done(self, ev: SourceEvidence) -> bool:
        """Nothing more to wait for from this source."""
        return not self.missing(ev) and ev.steps >= max(self.steps, self.min_steps)


Progress = Callable[[str], None]


def _gone(ev: SourceEvidence, now: float, gone_after_s: float) -> str | None:
    if ev.health is not None and ev.health.final:
        return "its publisher closed"
    if ev.last_seen and now - ev.last_seen > gone_after_s:
        return f"silent for {now - ev.last_seen:.0f}s"
    return None


def report(ev: SourceEvidence, enough: Enough, gone: str | None) -> SourceReport:
    s = ev.acceptance.summary(0.0)
    expected, who = enough.expected(ev)
    missing = enough.missing(ev)
    if gone is not None and missing:
        missing.append(f"went away: {gone}")
    return SourceReport(
        key=ev.key,
        hello=ev.hello is not None,
        steps=ev.steps,
        request_steps=ev.acceptance.request_steps,
        aux_rows=ev.aux_merged.rows,
        malformed=ev.malformed,
        accept_length=ev.acceptance.mean_accept_length,
        unconditional=[round(float(x), 4) for x in s.unconditional],
        conditional=[round(float(x), 4) for x in s.conditional],
        expected_accept_length=expected,
        expected_by=who,
        missing=missing,
        gone=gone,
        last_malformed=ev.last_malformed,
    )


def progress_line(book: EvidenceBook, enough: Enough, elapsed: float, timeout: float) -> str:
    parts = []
    for ev in list(book.sources.values())[:8]:
        if ev.hello is None:
            parts.append(f"{ev.key} awaiting hello")
            continue
        want = [f"{ev.steps}/{max(enough.steps, enough.min_steps)} steps"]
        if enough.expected(ev)[0] is not None:
            rs = enough.thresholds.min_request_steps
            want.append(f"{min(ev.acceptance.request_steps, rs)}/{rs} request-steps")
        if enough.manifest is not None and ev.hello.captures_aux():
            want.append(f"{ev.aux_merged.rows}/{MIN_AUX_ROWS} aux rows")
        parts.append(f"{ev.key} {', '.join(want)}")
    if len(book.sources) > 8:
        parts.append(f"+{len(book.sources) - 8} more")
    seen = "; ".join(parts) if parts else "no source yet"
    return f"{seen} [{elapsed:.0f}s of {timeout:g}s]"


class Watch:
    """The judging half of ``check``, fed batch by batch by a socket or a recording."""

    def __init__(self, enough: Enough, gone_after_s: float = GONE_AFTER_S) -> None:
        self.enough = enough
        self.book = EvidenceBook(manifest=enough.manifest)
        self.gone: dict[str, str] = {}
        self.gone_after_s = gone_after_s
        self._crashed_at: dict[str, float] = {}  # source -> when its crash was first seen

    def fold(self, events: list[Event], now: float, on_malformed: OnMalformed | None = None) -> bool:
        """Fold in a batch received at ``now``; True once there is nothing more to wait for."""
        self.book.ingest(events, now, on_malformed)
        sources = self.book.sources.values()
        for ev in sources:
            why = _gone(ev, now, self.gone_after_s)
            if why is not None:
                self.gone.setdefault(ev.key, why)
            else:
                self.gone.pop(ev.key, None)  # back (a reconnect)
        crashed = [ev for ev in sources if ev.health is not None and ev.health.engine_error]
        for ev in crashed:
            self._crashed_at.setdefault(ev.key, now)
        if crashed and all(
            ev.hello is not None or now - self._crashed_at[ev.key] >= CRASH_HELLO_GRACE_S for ev in crashed
        ):
            return True  # a crash is certain now: no reason to wait out the timeout
        return bool(sources) and all(self.enough.done(ev) or ev.key in self.gone for ev in sources)

    def result(self, ledger: FrameLedger | PerEndpoint, waited: float, nothing_heard: str) -> CheckResult:
        """The verdict; ``NoStream(nothing_heard)`` when no source ever said hello."""
        sources = self.book.sources
        if not any(s.hello is not None or s.health is not None for s in sources.values()):
            seen = (
                f"; {ledger.malformed} malformed frames ({ledger.last_malformed})" if ledger.malformed else ""
            )
            raise NoStream(nothing_heard + seen)
        manifest = self.enough.manifest
        findings: list[Finding] = []
        for s in sources.values():
            findings.extend(diagnose(s, manifest, self.enough.thresholds))
        reports = [report(s, self.enough, self.gone.get(s.key)) for s in sources.values()]
        # Frames that failed before naming a source: counted by the ledger, not by any source.
        per_source = sum(s.malformed for s in sources.values())
        undecodable = max(0, ledger.malformed - per_source)
        result = CheckResult(
            findings, sources, reports, waited, undecodable, ledger.last_malformed if undecodable else None
        )
        result.evictions = evicted = replace(self.book.evictions)
        if evicted.total or ledger.evicted_sources:
            forgotten = evicted.describe() or f"{ledger.evicted_sources} forgotten"
            result.notes.append(f"more sources than the book holds: {forgotten}")
        return result


def watch(
    endpoints: list[str],
    manifest: Manifest | None,
    *,
    steps: int = 50,
    min_steps: int | None = None,
    thresholds: Thresholds = THRESHOLDS,
    timeout: float = 30.0,
    curve: CurveClient | None = None,
    progress: Progress | None = None,
    gone_after_s: float = GONE_AFTER_S,
    subscriber: Subscriber | None = None,
) -> CheckResult:
    """Watch until every source is done, gone or crashed, or the timeout; then judge. Every endpoint
    named must be heard: one through which no source said anything makes the verdict partial, and is
    named (``CheckResult.unheard``)."""
    w = Watch(Enough(steps, steps if min_steps is None else min_steps, manifest, thresholds), gone_after_s)
    sub: Subscriber | PerEndpoint = subscriber or PerEndpoint(endpoints, curve)
    # a subscriber handed in (one socket for all) cannot say which endpoint was heard
    all_heard = sub.all_heard if isinstance(sub, PerEndpoint) else (lambda: True)
    t0 = time.monotonic()
    deadline = t0 + timeout
    next_progress = t0 + 1.0
    try:
        while time.monotonic() < deadline:
            if w.fold(sub.poll(50), time.time(), sub.count_malformed) and all_heard():
                break
            if progress is not None and time.monotonic() >= next_progress:
                next_progress += 1.0
                progress(progress_line(w.book, w.enough, time.monotonic() - t0, timeout))
    finally:
        if subscriber is None:
            sub.close()
    states = ", ".join(f"{ep} {st}" for ep, st in sub.endpoints.items())
    result = w.result(
        sub,
        time.monotonic() - t0,
        f"no hello within {timeout:g}s from {states}: is the server publishing there?",
    )
    result.unheard = sub.unheard() if isinstance(sub, PerEndpoint) else []
    return result


class PerEndpoint:
    """One subscriber per endpoint (a SUB socket connected to several cannot say which one a frame
    came from), polled together; what each endpoint delivered is kept, so an endpoint that never
    answered is named instead of vanishing from a verdict. Sums the subscribers' counts."""

    def __init__(self, endpoints: list[str], curve: CurveClient | None) -> None:
        import zmq

        self.subs = [Subscriber([ep], curve=curve) for ep in endpoints]
        self.heard: dict[str, int] = dict.fromkeys(endpoints, 0)  # events that named a source
        self.malformed, self.counted, self.evicted_sources = 0, 0, 0
        self.last_malformed: str | None = None
        self._poller = zmq.Poller()
        for s in self.subs:
            self._poller.register(s.socket, zmq.POLLIN)

    @property
    def endpoints(self) -> dict[str, str]:
        return {ep: st for s in self.subs for ep, st in s.endpoints.items()}

    def poll(self, timeout_ms: int = 100) -> list[Event]:
        self._poller.poll(timeout_ms)
        out: list[Event] = []
        for s in self.subs:
            got = s.poll(0)  # also reads its endpoint's state (connected, refused, ...)
            if got:
                ep = next(iter(s.endpoints))
                self.heard[ep] += len(got)
                out.extend(got)
        self.malformed = sum(s.malformed for s in self.subs) + self.counted
        self.last_malformed = next(
            (s.last_malformed for s in self.subs if s.last_malformed), self.last_malformed
        )
        self.evicted_sources = max((s.evicted_sources for s in self.subs), default=0)
        return out

    def count_malformed(self, reason: str) -> None:
        self.counted += 1
        self.malformed += 1
        self.last_malformed = reason

    def all_heard(self) -> bool:
        return all(self.heard.values())

    def unheard(self) -> list[str]:
        states = self.endpoints
        return [f"{ep}: nothing heard ({states.get(ep, 'unknown')})" for ep, n in self.heard.items() if not n]

    def close(self) -> None:
        for s in self.subs:
            s.close()


def judge_recording(
    frames: Iterable[RecordedFrame],
    manifest: Manifest | None,
    *,
    steps: int = 50,
    min_steps: int | None = None,
    thresholds: Thresholds = THRESHOLDS,
    timeout: float = 30.0,
    gone_after_s: float = GONE_AFTER_S,
) -> CheckResult:
    """The verdict ``check`` would have given had it started with the recording: the same judging,
    fed the recorded frames at their receive times, with ``timeout`` in recording time."""
    w = Watch(Enough(steps, steps if min_steps is None else min_steps, manifest, thresholds), gone_after_s)
    ledger = FrameLedger()
    t0: int | None = None
    last = 0
    done = False  # stopped before the end: judged, or the timeout
    for t_ns, group in groupby(frames, key=lambda f: f.log_time_ns):
        t0 = t_ns if t0 is None else t0
        if t_ns - t0 > timeout * 1e9:
            # live, the clock would have run on to the deadline: a source silent by then is gone
            last = t0 + int(timeout * 1e9)
            w.fold([], last / 1e9, ledger.count_malformed)
            done = True
            break
        last = t_ns
        events = [ev for ev in map(ledger.decode_frame, (f.data for f in group)) if ev is not None]
        if w.fold(events, t_ns / 1e9, ledger.count_malformed):
            done = True
            break
    waited = 0.0 if t0 is None else (last - t0) / 1e9
    result = w.result(ledger, waited, f"no hello in the first {timeout:g}s of the recording")
    result.read_whole = not done
    if result.read_whole:
        result.notes.append(
            f"the recording ends {waited:.1f}s after its first frame, before the evidence was in"
        )
    return result
