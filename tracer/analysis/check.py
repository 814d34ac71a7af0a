"""Headless verdict for a deploy pipeline: watch a stream until the evidence is in, then judge.

A gate must never pass on evidence it did not see, so the verdict has four outcomes (the exit
codes of ``eagle3-top check``):

- ``ok``: every source showed its hello and at least ``min_steps`` verify steps (and, with a
  manifest, enough aux rows for the layer checks), and nothing is wrong;
- ``findings``: an error finding, a crashed engine among them; reported the moment it is certain;
- ``partial``: no error, but some source fell short of that evidence (idle, gone, or sending
  frames we could not read): what it showed and what it lacked are listed;
- ``no stream`` (``NoStream``): no hello from anywhere: a connection problem, not a verdict.

Structural findings need only the hello; statistical ones need ``MIN_AUX_ROWS`` aux rows and
``MIN_REQUEST_STEPS`` request-steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eagle3_top.tracer.subscriber import Subscriber

from .diagnose import MIN_AUX_ROWS, MIN_REQUEST_STEPS, diagnose, expected_accept_length
from .evidence import EvidenceBook, SourceEvidence
from .findings import Finding, has_errors
from .manifest import Manifest

if TYPE_CHECKING:
    from eagle3_top.tracer.curve import CurveClient

OK, FINDINGS, PARTIAL = "ok", "findings", "partial"
# A publisher sends a health event every second: this long without any event, a source is gone.
GONE_AFTER_S = 5.0


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

    @property
    def complete(self) -> bool:
        return all(r.complete for r in self.reports)

    @property
    def verdict(self) -> str:
        if has_errors(self.findings):
            return FINDINGS
        return OK if self.complete and not self.undecodable else PARTIAL


@dataclass(frozen=True)
class Enough:
    """What counts as enough evidence per source."""

    steps: int = 50  # stop watching a source once it showed this many verify steps
    min_steps: int = 50  # fewer than this is partial evidence
    manifest: Manifest | None = None

    def missing(self, ev: SourceEvidence) -> list[str]:
        out = []
        if ev.hello is None:
            out.append("no hello (the server's wiring is unknown)")
        if ev.steps < self.min_steps:
            out.append(f"{ev.steps} of {self.min_steps} verify steps")
        if (
            self.manifest is not None
            and ev.aux_merged.rows < MIN_AUX_ROWS
            and (ev.hello is None or ev.hello.captures_aux())
        ):
            out.append(f"{ev.aux_merged.rows} of {MIN_AUX_ROWS} aux rows (the layer-map checks)")
        if ev.malformed and not ev.steps:
            out.append(f"its {ev.malformed} frame(s) failed the schema ({ev.last_malformed})")
        return out

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
    expected, who = (None, "") if ev.hello is None else expected_accept_length(ev.hello, enough.manifest)
    missing = enough.missing(ev)
    if gone is not None and missing:
        missing.append(f"went away: {gone}")
    if (
        expected is not None
        and ev.acceptance.request_steps < MIN_REQUEST_STEPS
        and not any("verify steps" in m for m in missing)
    ):
        missing.append(
            f"{ev.acceptance.request_steps} of {MIN_REQUEST_STEPS} request-steps "
            "(the accept-length check against training)"
        )
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
        if enough.manifest is not None and ev.hello.captures_aux():
            want.append(f"{ev.aux_merged.rows}/{MIN_AUX_ROWS} aux rows")
        parts.append(f"{ev.key} {', '.join(want)}")
    if len(book.sources) > 8:
        parts.append(f"+{len(book.sources) - 8} more")
    seen = "; ".join(parts) if parts else "no source yet"
    return f"{seen} [{elapsed:.0f}s of {timeout:g}s]"


def watch(
    endpoints: list[str],
    manifest: Manifest | None,
    *,
    steps: int = 50,
    min_steps: int | None = None,
    timeout: float = 30.0,
    curve: CurveClient | None = None,
    progress: Progress | None = None,
    gone_after_s: float = GONE_AFTER_S,
    subscriber: Subscriber | None = None,
) -> CheckResult:
    """Watch until every source is done, gone or crashed, or the timeout; then judge."""
    enough = Enough(steps, steps if min_steps is None else min_steps, manifest)
    sub = subscriber or Subscriber(endpoints, curve=curve)
    book = EvidenceBook(manifest=manifest)
    t0 = time.monotonic()
    deadline = t0 + timeout
    next_progress = t0 + 1.0
    gone: dict[str, str] = {}
    try:
        while time.monotonic() < deadline:
            book.ingest(sub.poll(50), time.time(), sub.count_malformed)
            now = time.time()
            for ev in book.sources.values():
                why = _gone(ev, now, gone_after_s)
                if why is not None:
                    gone.setdefault(ev.key, why)
                else:
                    gone.pop(ev.key, None)  # back (a reconnect)
            if any(ev.health is not None and ev.health.engine_error for ev in book.sources.values()):
                break  # a crash is certain now: no reason to wait out the timeout
            if book.sources and all(enough.done(ev) or ev.key in gone for ev in book.sources.values()):
                break
            if progress is not None and time.monotonic() >= next_progress:
                next_progress += 1.0
                progress(progress_line(book, enough, time.monotonic() - t0, timeout))
    finally:
        if subscriber is None:
            sub.close()
    waited = time.monotonic() - t0
    sources = book.sources
    if not any(s.hello is not None or s.health is not None for s in sources.values()):
        states = ", ".join(f"{ep} {st}" for ep, st in sub.endpoints.items())
        seen = f"; {sub.malformed} malformed frames ({sub.last_malformed})" if sub.malformed else ""
        raise NoStream(f"no hello within {timeout:g}s from {states}{seen}: is the server publishing there?")
    findings: list[Finding] = []
    for s in sources.values():
        findings.extend(diagnose(s, manifest))
    reports = [report(s, enough, gone.get(s.key)) for s in sources.values()]
    # Frames that failed before naming a source: counted by the subscriber, not by any source.
    per_source = sum(s.malformed for s in sources.values())
    undecodable = max(0, sub.malformed - per_source)
    result = CheckResult(
        findings, sources, reports, waited, undecodable, sub.last_malformed if undecodable else None
    )
    if sub.evicted_sources or book.dropped_sources:
        result.notes.append(
            f"more sources than the book holds: {max(sub.evicted_sources, book.dropped_sources)} forgotten"
        )
    return result
