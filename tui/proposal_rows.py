"""Draft proposals ready to draw: one request's row of a verify step, with the accepted path marked.

Made when a snapshot is taken, for the few rows on screen, never per event."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from eagle3_top.tracer.schema import BONUS, StepView

PROPOSAL_ROWS = 3


@dataclass(frozen=True)
class ProposalRow:
    """One request of the latest step, ready to draw."""

    rid: str
    root: int
    proposals: tuple[int, ...]  # draft tokens after the root, in block order
    accepted_mask: tuple[bool, ...]  # per proposal: on the accepted path
    accepted: int  # accepted drafts (bonus excluded)
    bonus: int | None  # the bonus token committed after the accepted drafts
    tree: bool


def proposal_rows(sv: StepView | None, rows: int = PROPOSAL_ROWS) -> tuple[ProposalRow, ...]:
    if sv is None or sv.batch == 0 or sv.n == 0:
        return ()
    k = min(rows, sv.batch)
    return tuple(proposal_row(sv, i) for i in range(k))


def proposal_row(sv: StepView, i: int) -> ProposalRow:
    """Row ``i`` of a step: its drafts, which of them were accepted, and the bonus token."""
    a = int(sv.accepted[i])
    # where row i's committed tokens start: the accept lengths of the rows before it
    off = int(sv.accepted[:i].sum()) + i * BONUS
    draft = sv.draft[i]
    committed = sv.tokens[off : off + a + 1]
    bonus = int(committed[a]) if committed.size > a else None
    if sv.parents is None:
        mask = tuple(j < a for j in range(sv.n - 1))
    else:
        mask = _tree_path(draft, sv.parents[i], committed[:a])
    return ProposalRow(
        rid=sv.rids[i],
        root=int(draft[0]),
        proposals=tuple(int(t) for t in draft[1:]),
        accepted_mask=mask,
        accepted=a,
        bonus=bonus,
        tree=sv.parents is not None,
    )


def _tree_path(draft: np.ndarray, parents: np.ndarray, accepted_tokens: np.ndarray) -> tuple[bool, ...]:
    """Mark the nodes (1..n-1) on the accepted path: follow children whose token was committed."""
    n = draft.shape[0]
    mask = [False] * (n - 1)
    cur = 0
    for tok in accepted_tokens:
        nxt = -1
        for j in range(1, n):
            if parents[j] == cur and draft[j] == tok:
                nxt = j
                break
        if nxt < 0:
            break
        mask[nxt - 1] = True
        cur = nxt
    return tuple(mask)
