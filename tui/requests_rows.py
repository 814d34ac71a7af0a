"""The requests view's rows: a source's request table filtered, sorted and cut to what a screen
can hold. Pure (no textual), so the order a user sees is tested without a screen."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from eagle3_top.tracer.analysis.requests import RequestTable

MAX_ROWS = 500  # a table longer than this is read by filtering, not scrolling
# The orders `s` cycles through: name, what the header says, the key (higher first).
SORTS: tuple[tuple[str, str], ...] = (
    ("recent", "running first, then last heard"),
    ("tokens", "tokens generated"),
    ("acc_len", "mean accept length"),
    ("last", "last acceptance"),
    ("age", "age"),
)


@dataclass(frozen=True)
class RequestRow:
    rid: str
    internal: bool
    running: bool
    tokens: int
    steps: int
    mean_accept_length: float
    last_accept_length: int
    age_s: float  # since its first step was seen
    idle_s: float  # since its last step


@dataclass(frozen=True)
class RequestRows:
    rows: tuple[RequestRow, ...]
    total: int  # requests known
    matching: int  # after the filter and the internal switch
    running: int  # of the matching ones
    hidden_internal: int


def request_rows(
    table: RequestTable,
    now: float,
    *,
    sort: str = "recent",
    reverse: bool = False,
    text: str = "",
    show_internal: bool = False,
    limit: int = MAX_ROWS,
) -> RequestRows:
    n = len(table)
    keep = np.ones(n, bool)
    hidden = 0
    if not show_internal:
        hidden = int(table.internal.sum())
        keep &= ~table.internal
    if text:
        needle = text.lower()
        keep &= np.fromiter((needle in r.lower() for r in table.rids), bool, count=n)
    idx = np.nonzero(keep)[0]
    order = _order(table, idx, sort)
    if reverse:
        order = order[::-1]
    mean = table.mean_accept_length
    rows = tuple(
        RequestRow(
            rid=table.rids[i],
            internal=bool(table.internal[i]),
            running=bool(table.in_flight[i]),
            tokens=int(table.tokens[i]),
            steps=int(table.steps[i]),
            mean_accept_length=float(mean[i]),
            last_accept_length=int(table.last_len[i]),
            age_s=max(0.0, now - float(table.first_seen[i])),
            idle_s=max(0.0, now - float(table.last_seen[i])),
        )
        for i in order[:limit].tolist()
    )
    return RequestRows(
        rows=rows,
        total=n,
        matching=len(idx),
        running=int(table.in_flight[idx].sum()),
        hidden_internal=hidden,
    )


def _order(table: RequestTable, idx: np.ndarray, sort: str) -> np.ndarray:
    """Indices of ``idx`` in display order (the largest first; ties by rid order of arrival)."""
    if sort == "tokens":
        key = table.tokens[idx]
    elif sort == "acc_len":
        key = table.mean_accept_length[idx]
    elif sort == "last":
        key = table.last_len[idx]
    elif sort == "age":
        key = -table.first_seen[idx]  # the oldest first
    else:  # running first, then the most recently heard
        return idx[np.lexsort((-table.last_seen[idx], ~table.in_flight[idx]))]
    return idx[np.argsort(-key, kind="stable")]


def sort_label(sort: str) -> str:
    return dict(SORTS).get(sort, sort)


def next_sort(sort: str) -> str:
    names = [s for s, _ in SORTS]
    return names[(names.index(sort) + 1) % len(names)] if sort in names else names[0]
