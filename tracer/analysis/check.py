"""Headless verdict for a deploy pipeline: watch a stream until the evidence is in, then judge.

Structural findings need only the hello; statistical ones need ``MIN_AUX_ROWS`` aux rows and
``MIN_REQUEST_STEPS`` request-steps. ``watch`` stops as soon as every source has its hello and
``steps`` verify steps (and, with a manifest, enough aux rows), or at the timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eagle3_top.tracer.subscriber import Subscriber

from .diagnose import MIN_AUX_ROWS, diagnose
from .evidence import EvidenceBook, SourceEvidence
from .findings import Finding
from .manifest import Manifest

if TYPE_CHECKING:
    from eagle3_top.tracer.curve import CurveClient


class NoStream(RuntimeError):
    """Nothing usable arrived: a connection problem, not a verdict."""


@dataclass
class CheckResult:
    findings: list[Finding]
    sources: dict[str, SourceEvidence]
    waited_s: float
    complete: bool  # every source reached the evidence it needed before the timeout
    notes: list[str] = field(default_factory=list)


def _ready(ev: SourceEvidence, steps: int, manifest: Manifest | None) -> bool:
    if ev.hello is None or ev.steps < steps:
        return False
    return manifest is None or ev.aux_merged.rows >= MIN_AUX_ROWS or not ev.hello.captures_aux()


def watch(
    endpoints: list[str],
    manifest: Manifest | None,
    *,
    steps: int = 50,
    timeout: float = 30.0,
    curve: CurveClient | None = None,
) -> CheckResult:
    sub = Subscriber(endpoints, curve=curve)
    book = EvidenceBook()
    t0 = time.monotonic()
    deadline = t0 + timeout
    complete = False
    try:
        while time.monotonic() < deadline:
            book.ingest(sub.poll(50), time.time(), sub.count_malformed)
            if book.sources and all(_ready(s, steps, manifest) for s in book.sources.values()):
                complete = True
                break
    finally:
        sub.close()
    waited = time.monotonic() - t0
    sources = book.sources
    if not any(s.hello is not None for s in sources.values()):
        states = ", ".join(f"{ep} {st}" for ep, st in sub.endpoints.items())
        seen = f"; {sub.malformed} malformed frames ({sub.last_malformed})" if sub.malformed else ""
        raise NoStream(f"no hello within {timeout:g}s from {states}{seen}: is the server publishing there?")
    findings: list[Finding] = []
    notes = []
    for s in sources.values():
        findings.extend(diagnose(s, manifest))
        if not _ready(s, steps, manifest):
            notes.append(
                f"{s.key}: verdict on partial evidence ({s.steps} steps, {s.aux_merged.rows} aux rows) after {waited:.1f}s"
            )
    return CheckResult(findings, sources, waited, complete, notes)
