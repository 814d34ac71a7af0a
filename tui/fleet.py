"""The fleet: every source of a snapshot merged into one picture (no textual import).

Merged figures add up the sources' counts (request-steps by accept length, request-steps that
proposed each position, verify steps and tokens per second) and divide once, so a source counts as
much as the request-steps it served: never a mean of per-source ratios. Rows are sorted worst first
(``worst_key``), findings grouped by code across sources, and sources that went stale, closed, went
away or restarted are named with when.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from eagle3_top.tracer.analysis.findings import ERROR, INFO, WARNING

from .fmt import when
from .snapshot import Snapshot, SourceSnapshot

SEVERITIES = (ERROR, WARNING, INFO)  # worst first; no finding ranks after all of them
SHOWN_KEYS = 6  # a group's message names this many sources, then counts the rest

# What happened to a source, most telling first: only the first that applies is its state.
REPLACED, CLOSED, GONE, STALE, RESTARTED = "replaced", "closed", "gone", "stale", "restarted"


@dataclass(frozen=True)
class Lifecycle:
    """Something that happened to a source, and when (wall clock; None when unknown)."""

    key: str
    what: str  # REPLACED, CLOSED, GONE, STALE or RESTARTED
    at: float | None
    detail: str = ""  # "by pid 4242", "endpoint down", "2x under the same id"

    def describe(self, now: float) -> str:
        """``host:1:r0 replaced by pid 7 at 14:03:07 (12s ago)``, ``... stale, last heard at ...``."""
        at = f" at {when(self.at, now)}" if self.at is not None else ""
        if self.what in (REPLACED, RESTARTED, CLOSED):
            detail = f" ({self.detail})" if self.what == RESTARTED and self.detail else ""
            by = f" {self.detail}" if self.what == REPLACED else ""
            return f"{self.key} {self.what}{by}{at}{detail}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.key} {self.what}{detail}, last heard{at}"


@dataclass(frozen=True)
class FleetRow:
    source: SourceSnapshot
    worst: str | None  # the worst severity among its findings
    findings: int
    ratio: float | None  # accept length / training's expected; None without either
    state: Lifecycle | None  # replaced, closed, gone or stale; None: live
    restart: Lifecycle | None = None


@dataclass(frozen=True)
class FindingGroup:
    code: str
    severity: str  # the worst it has on any source
    keys: tuple[str, ...]
    of: int  # sources in the fleet

    def describe(self) -> str:
        names = ", ".join(self.keys[:SHOWN_KEYS])
        more = f", +{len(self.keys) - SHOWN_KEYS} more" if len(self.keys) > SHOWN_KEYS else ""
        return f"{self.code} on {len(self.keys)} of {self.of} sources: {names}{more}"


@dataclass(frozen=True)
class FleetSummary:
    now: float
    sources: int
    request_steps: int
    verify_steps: int
    accept_length: float  # committed tokens / request-steps, over every source
    accept_rate: float  # accepted drafts / proposed drafts, over every source
    unconditional: np.ndarray  # [positions] P(position i accepted)
    conditional: np.ndarray  # [positions] P(i accepted | i-1 accepted)
    steps_per_s: float  # verify steps/s, all sources together
    tokens_per_s: float
    rows: tuple[FleetRow, ...]  # worst first
    groups: tuple[FindingGroup, ...]  # errors first, then the most widespread
    events: tuple[Lifecycle, ...]  # replaced, closed, gone, stale, restarted, newest first

    def headline(self) -> str:
        """One line over the whole fleet, for the main screen."""
        bad = sum(1 for r in self.rows if r.worst == ERROR)
        away = sum(1 for r in self.rows if r.state is not None)
        acc = " ".join(f"{c:.0%}" for c in self.conditional[:4]) or "—"
        parts = [
            f"fleet of {self.sources}",
            f"accept len {self.accept_length:.2f}" if self.request_steps else "accept len —",
            f"cond {acc}",
            f"{self.steps_per_s:,.1f} steps/s",
            f"{self.tokens_per_s:,.0f} tok/s",
        ]
        if bad:
            parts.append(f"{bad} with errors")
        if away:
            parts.append(f"{away} not live")
        return " · ".join(parts)


def worst_key(row: FleetRow) -> tuple[int, float, float, str]:
    """Worst first: the worst finding's severity (error, warning, info, none), then accept length
    against training's expected (lowest first), then accept length (lowest first); a source with
    no expected figure, or no step yet, after those that have one."""
    sev = SEVERITIES.index(row.worst) if row.worst in SEVERITIES else len(SEVERITIES)
    s = row.source.summary
    length = s.mean_accept_length if s.request_steps else math.inf
    return sev, row.ratio if row.ratio is not None else math.inf, length, row.source.key


def fleet_summary(snap: Snapshot) -> FleetSummary:
    """The merged figures, rows, finding groups and lifecycle of every source in ``snap``."""
    srcs = snap.sources
    width = max((len(s.summary.histogram) for s in srcs), default=0)
    depth = max((len(s.summary.proposed) for s in srcs), default=0)
    hist = np.zeros(width, dtype=np.int64)  # request-steps by accept length
    proposed = np.zeros(depth, dtype=np.int64)  # request-steps that proposed position i (1..)
    steps_s = tok_s = 0.0
    verify = 0
    for s in srcs:
        h, p = s.summary.histogram, s.summary.proposed
        hist[: len(h)] += h
        proposed[: len(p)] += p
        steps_s += s.summary.steps_per_s
        tok_s += s.summary.tokens_per_s
        verify += s.summary.verify_steps
    uncond, cond, length, rate = _rates(hist, proposed)
    states, restarts = _lifecycle(snap)
    rows = sorted((_row(s, states.get(s.key), restarts.get(s.key)) for s in srcs), key=worst_key)
    events = [*states.values(), *restarts.values()]
    events.sort(key=lambda e: -(e.at if e.at is not None else -math.inf))
    return FleetSummary(
        now=snap.now,
        sources=len(srcs),
        request_steps=int(hist.sum()),
        verify_steps=verify,
        accept_length=length,
        accept_rate=rate,
        unconditional=uncond,
        conditional=cond,
        steps_per_s=steps_s,
        tokens_per_s=tok_s,
        rows=tuple(rows),
        groups=_groups([r.source for r in rows]),
        events=tuple(events),
    )


def _rates(hist: np.ndarray, proposed: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Per-position rates, accept length and accept rate from merged counts, as
    ``AcceptanceStats.summary`` derives them from one source's."""
    rs = int(hist.sum())
    # accepted drafts per request-step = accept length - 1; at_least[i]: request-steps with >= i
    at_least = np.cumsum(hist[::-1])[::-1][1:] if rs else np.zeros(1, dtype=np.int64)
    n = len(proposed)
    at = np.zeros(n + 1, dtype=np.int64)
    at[: min(n + 1, len(at_least))] = at_least[: n + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        uncond = np.where(proposed > 0, at[1:] / np.maximum(proposed, 1), 0.0)
        cond = np.where(at[:-1] > 0, at[1:] / np.maximum(at[:-1], 1), 0.0)
    tokens = int(np.dot(np.arange(len(hist)), hist))
    drafts = int(proposed.sum())
    length = tokens / rs if rs else 0.0
    rate = (tokens - rs) / drafts if drafts else 0.0
    return uncond.astype(float), cond.astype(float), length, rate


def _row(src: SourceSnapshot, state: Lifecycle | None, restart: Lifecycle | None) -> FleetRow:
    worst = next((sev for sev in SEVERITIES if any(f.severity == sev for f in src.findings)), None)
    exp = src.expected_accept_length
    ratio = (
        src.summary.mean_accept_length / exp if exp and src.summary.request_steps and src.speculates else None
    )
    return FleetRow(src, worst, len(src.findings), ratio, state, restart)


def _groups(srcs: list[SourceSnapshot]) -> tuple[FindingGroup, ...]:
    """Each code once, with the sources that have it in the order given (worst first)."""
    keys: dict[str, list[str]] = defaultdict(list)
    worst: dict[str, int] = {}
    for s in srcs:
        seen = set()
        for f in s.findings:
            rank = SEVERITIES.index(f.severity) if f.severity in SEVERITIES else len(SEVERITIES)
            worst[f.code] = min(worst.get(f.code, rank), rank)
            if f.code not in seen:
                seen.add(f.code)
                keys[f.code].append(s.key)
    groups = [
        FindingGroup(code, SEVERITIES[min(worst[code], len(SEVERITIES) - 1)], tuple(ks), len(srcs))
        for code, ks in keys.items()
    ]
    groups.sort(key=lambda g: (SEVERITIES.index(g.severity), -len(g.keys), g.code))
    return tuple(groups)


def _endpoint_down(src: SourceSnapshot, endpoints: tuple[tuple[str, str], ...]) -> bool:
    """The endpoint the source was heard on is down: its publisher's own bound endpoint as the
    monitor connected to it, or the monitor's only endpoint."""
    if len(endpoints) == 1:
        return "down" in endpoints[0][1]
    ep = src.health.endpoint if src.health is not None else None
    return any(e == ep and "down" in state for e, state in endpoints)


def _lifecycle(snap: Snapshot) -> tuple[dict[str, Lifecycle], dict[str, Lifecycle]]:
    """Per source: its state when not live (replaced, closed, gone, stale) and its restart."""
    states: dict[str, Lifecycle] = {}
    restarts: dict[str, Lifecycle] = {}
    # A publisher restarted in a new process has a new key but the same host, rank and bound
    # endpoint: order each such line by start time, each one replaced the one before.
    lines: dict[tuple[str, str, str], list[SourceSnapshot]] = defaultdict(list)
    for s in snap.sources:
        h = s.health
        if h is not None and h.endpoint and h.started is not None:
            lines[(s.host, h.endpoint, s.rank)].append(s)
    for line in lines.values():
        line.sort(key=lambda s: s.health.started if s.health is not None else 0.0)
        for old, new in zip(line, line[1:], strict=False):
            at = new.health.started if new.health is not None else None
            states[old.key] = Lifecycle(old.key, REPLACED, at, f"by pid {new.pid}")
            restarts[new.key] = Lifecycle(new.key, RESTARTED, at, f"was pid {old.pid}")
    for s in snap.sources:
        last = snap.now - s.age_s
        h = s.health
        if s.key not in states:
            if h is not None and h.final:
                states[s.key] = Lifecycle(s.key, CLOSED, last)
            elif s.dead or (s.stale and _endpoint_down(s, snap.endpoints)):
                why = "endpoint down" if _endpoint_down(s, snap.endpoints) else "silent"
                states[s.key] = Lifecycle(s.key, GONE, last, why)
            elif s.stale:
                states[s.key] = Lifecycle(s.key, STALE, last)
        if s.loss.restarts and s.key not in restarts:
            at = h.started if h is not None else None
            restarts[s.key] = Lifecycle(s.key, RESTARTED, at, f"{s.loss.restarts}x under the same id")
    return states, restarts
