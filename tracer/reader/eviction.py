"""The one eviction policy of every bounded table of sources: the ledger's sequence counters
(``FrameLedger``), the recorder's (``SeqGaps``) and the evidence book (``EvidenceBook``).

A stream that invents a source id per frame must neither grow memory nor push out the engines
really there. So a table at its bound forgets first the sources with the least proof of being an
engine (proof 0: neither a hello nor a step; 1: one of the two; ``PROVEN``: both), the stalest
first; unproven ones an eighth of the table at once, so that a flood costs one sort per many new
ids, not a scan per frame. Only a table full of proven sources forgets one of those, one at a time.
What each table counts as proof is its own: the book, a valid hello and a valid step; the sequence
counters, which read envelopes only, a hello frame and a step frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

PROVEN = 2  # a hello and steps


class Ranked(Protocol):
    def eviction_rank(self) -> tuple[int, float]:
        """(proof, when last heard): the least proof goes first, then the stalest."""
        ...


K = TypeVar("K")
V = TypeVar("V", bound=Ranked)


@dataclass
class Evictions:
    """Sources forgotten to bound memory, by kind."""

    unproven: int = 0  # never sent a hello and steps: most likely invented ids
    proven: int = 0  # had sent both: a real engine's figures, forgotten (they start over if it returns)

    @property
    def total(self) -> int:
        return self.unproven + self.proven

    def describe(self) -> str:
        """One line, only the kinds that occurred; empty when nothing was forgotten."""
        parts = []
        if self.unproven:
            parts.append(f"{self.unproven} never sent a hello and steps")
        if self.proven:
            parts.append(f"{self.proven} had: their figures start over")
        return f"{self.total} sources forgotten ({'; '.join(parts)})" if parts else ""


def make_room(table: dict[K, V], evictions: Evictions) -> list[V]:
    """Forget sources of ``table`` (a full one) by the policy above; what was forgotten, counted
    into ``evictions``."""
    ranks = {k: v.eviction_rank() for k, v in table.items()}
    least = min(proof for proof, _ in ranks.values())
    pool = sorted((k for k, (proof, _) in ranks.items() if proof == least), key=lambda k: ranks[k][1])
    take = 1 if least >= PROVEN else max(1, len(table) // 8)
    gone = [table.pop(k) for k in pool[:take]]
    if least >= PROVEN:
        evictions.proven += len(gone)
    else:
        evictions.unproven += len(gone)
    return gone
