"""One request, step by step: what its timeline screen draws, taken with the snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_top.tracer.analysis.requests import RequestTracker
from eagle3_top.tracer.schema import DecodeError, step_view

from .proposal_rows import ProposalRow, proposal_row


@dataclass(frozen=True)
class TimelineStep:
    t: float  # receive time
    step: int  # the engine's step counter
    row: ProposalRow

    @property
    def accept_length(self) -> int:
        return self.row.accepted + 1


@dataclass(frozen=True)
class RequestTimeline:
    key: str  # the source
    rid: str
    lens: tuple[int, ...]  # accept length of each step since the timeline was opened (and before, if recent)
    steps: tuple[TimelineStep, ...]  # its steps among the source's recent step events, oldest first
    recent_span: int  # how many step events the source keeps whole


def request_timeline(key: str, tracker: RequestTracker, rid: str) -> RequestTimeline:
    """The caller holds the book's lock (the tracker is written by the receive worker)."""
    steps = []
    for t, ev, i in tracker.steps_of(rid):
        try:
            sv = step_view(ev)
        except DecodeError:  # counted when it arrived; it cannot be drawn either
            continue
        steps.append(TimelineStep(t=t, step=sv.step, row=proposal_row(sv, i)))
    hist = tracker.watched.get(rid)
    lens = tuple(hist) if hist is not None else tuple(s.accept_length for s in steps)
    return RequestTimeline(
        key=key, rid=rid, lens=lens, steps=tuple(steps), recent_span=tracker.recent.maxlen or 0
    )
