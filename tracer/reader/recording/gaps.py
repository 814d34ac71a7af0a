"""Sequence gaps seen by a recorder: the frames each source numbered that never reached it.

The live monitor counts them in ``FrameLedger.decode_frame``; the recorder reads only envelopes
(``schema.peek``, through ``RecordingWriter.add``) and feeds them here, to the same per-source
``SourceCounters``: the same reordering window, restarts and implausible jumps."""

from __future__ import annotations

from eagle3_top.tracer.reader.eviction import Evictions, make_room
from eagle3_top.tracer.reader.ledger import Loss, SourceCounters
from eagle3_top.tracer.schema import HEALTH, Envelope

# As the FrameLedger: a publisher inventing a source per frame must not grow memory without bound.
MAX_SOURCES = 1024


class SeqGaps:
    """Counters per (endpoint, source): a source seen through two endpoints is counted on each."""

    def __init__(self, max_sources: int = MAX_SOURCES) -> None:
        self.sources: dict[tuple[str, str], SourceCounters] = {}
        self.max_sources = max_sources
        self.evictions = Evictions()
        self._evicted_missed = 0  # gaps of forgotten sources still count

    def see(self, endpoint: str, env: Envelope) -> None:
        key = (endpoint, env.src)
        counters = self.sources.get(key)
        if counters is None:
            if len(self.sources) >= self.max_sources:
                gone = make_room(self.sources, self.evictions)
                self._evicted_missed += sum(c.missed for c in gone)  # gaps of forgotten sources still count
            self.sources[key] = counters = SourceCounters(env.seq, env.seq)
        if env.kind == HEALTH:
            counters.see_health(env.fields)
        counters.see(env.seq, env.kind)

    @property
    def missed(self) -> int:
        """Frames numbered by their sources that this recorder never received (tracer drops included)."""
        return self._evicted_missed + sum(c.missed for c in self.sources.values())

    def losses(self) -> dict[tuple[str, str], Loss]:
        """Per (endpoint, source), only those that lost something."""
        return {k: c.loss() for k, c in self.sources.items() if c.missed or c.restarts or c.resyncs}
