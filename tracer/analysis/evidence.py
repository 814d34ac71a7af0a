"""What the stream has shown, per source: the one evidence type that ``check``, ``probe`` and the
live monitor all fill, and the book that folds decoded events into it.

Hot path (``EvidenceBook.ingest``) per step event: the schema's shape checks (O(1) in Python) and a
``frombuffer`` view of the accepted column; the value checks and the counting run once per (source,
width) group of a batch with numpy (``schema.check_values``, ``AcceptanceStats.add_many``), so
nothing per request runs in Python. Memory is bounded: a fixed number of sources (past it, the
policy of ``reader.eviction``: sources that never sent a valid hello and steps go first), fixed-size
counters, and the latest hello, health, aux sample and
step event of each.

Clock: ``now`` is the receiver's wall clock. Steps are counted into per-second buckets at their
receive time, so rates do not depend on the clocks of remote hosts agreeing with ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from eagle3_top.tracer.analysis.acceptance import AcceptanceStats
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.probe_compare import ProbeComparison, compare_with_manifest
from eagle3_top.tracer.analysis.requests import INTERNAL_PREFIXES, RequestTracker
from eagle3_top.tracer.reader.eviction import Evictions, make_room
from eagle3_top.tracer.schema import (
    AUX,
    HEALTH,
    HELLO,
    PROBE,
    STEP,
    AuxSample,
    DecodeError,
    Event,
    Fingerprint,
    Health,
    Hello,
    StepView,
    aux_view,
    check_values,
    printable,
    probe_view,
    split_source_key,
    step_columns,
    step_depths,
    step_view,
)

MAX_SOURCES = 256

OnMalformed = Callable[[str], None]


class AuxEvidence:
    """Aux fingerprints of one source merged over time, weighted by rows."""

    def __init__(self) -> None:
        self._reset(0, 0)

    def _reset(self, slots: int, sketch_dim: int) -> None:
        self.rows = 0
        self.samples = 0
        self.slots = slots
        self._mean, self._ms, self._absmax = np.zeros(slots), np.zeros(slots), np.full(slots, -np.inf)
        self._sketch = np.zeros((slots, sketch_dim))
        self._has_sketch = True

    def add(self, fp: Fingerprint) -> None:
        rows, slots = fp.rows, fp.slots
        if rows <= 0 or slots <= 0:
            return
        if slots != self.slots:  # the layout changed (a restart): start over
            self._reset(slots, len(fp.sketch[0]) if fp.sketch else 0)
        self._mean = self._mean + np.asarray(fp.mean) * rows
        self._ms = self._ms + np.square(fp.rms) * rows  # merge mean squares, not roots
        if fp.absmax:
            self._absmax = np.maximum(self._absmax, fp.absmax)
        if fp.sketch and np.shape(fp.sketch) == self._sketch.shape:
            self._sketch = self._sketch + np.asarray(fp.sketch) * rows
        else:
            self._has_sketch = False
        self.rows += rows
        self.samples += 1

    def merged(self) -> Fingerprint | None:
        if not self.rows:
            return None
        return Fingerprint(
            rows=self.rows,
            slots=self.slots,
            slot_width=0,
            mean=tuple((self._mean / self.rows).tolist()),
            rms=tuple(np.sqrt(self._ms / self.rows).tolist()),
            absmax=tuple(np.maximum(self._absmax, 0).tolist()),
            sketch=tuple(map(tuple, (self._sketch / self.rows).tolist())) if self._has_sketch else (),
        )


@dataclass
class SourceEvidence:
    """Everything known about one source (``HOST:PID:rRANK``), fed by ``EvidenceBook.ingest``."""

    key: str
    acceptance: AcceptanceStats = field(default_factory=AcceptanceStats)
    hello: Hello | None = None
    health: Health | None = None
    aux: AuxSample | None = None  # the latest aux sample
    aux_merged: AuxEvidence = field(default_factory=AuxEvidence)
    last_step_event: Event | None = None  # the latest valid step, viewed lazily
    probe: ProbeComparison | None = None  # the latest probe, against the manifest
    probe_note: str | None = None  # why the latest probe event could not be compared
    requests: RequestTracker = field(default_factory=RequestTracker)
    last_seen: float = 0.0
    events: int = 0
    steps: int = 0
    step_errors: int = 0
    malformed: int = 0  # events of this source whose body failed the schema, any kind
    last_malformed: str | None = None
    hellos: int = 0
    healths: int = 0
    auxes: int = 0
    probes: int = 0
    _last_step: StepView | None = None

    @property
    def host_pid_rank(self) -> tuple[str, str, str]:
        return split_source_key(self.key)

    def eviction_rank(self) -> tuple[int, float]:
        """Proof of being an engine (a valid hello, valid steps: one each), then when last heard."""
        return (self.hello is not None) + (self.steps > 0), self.last_seen

    @property
    def engine(self) -> str:
        return (self.hello.engine if self.hello is not None else None) or "?"

    def latest_step(self) -> StepView | None:
        if self._last_step is None and self.last_step_event is not None:
            try:
                self._last_step = step_view(self.last_step_event)
            except DecodeError:
                self.last_step_event = None
        return self._last_step

    def _stepped(self, ev: Event, view: StepView | None = None) -> None:
        self.steps += 1
        self.last_step_event = ev
        self._last_step = view


_NO_ROWS = np.zeros(1, np.int64)  # a step event of batch 0: one event, no request-steps


class EvidenceBook:
    """Per-source evidence of many sources. Not thread-safe by itself: the caller serialises."""

    def __init__(
        self,
        *,
        max_sources: int = MAX_SOURCES,
        history_s: int = 120,
        manifest: Manifest | None = None,
        internal_prefixes: Sequence[str] = INTERNAL_PREFIXES,
        track_requests: bool = True,
    ) -> None:
        self.internal_prefixes = tuple(internal_prefixes)  # rids of the server's own requests
        # False: no step is parked for the per-request figures (``SourceEvidence.requests`` stays
        # empty), for a reader that draws no request table (the Prometheus exporter)
        self.track_requests = track_requests
        self.sources: dict[str, SourceEvidence] = {}
        self.manifest = manifest  # probe events are compared with its samples when given
        self.max_sources = max_sources
        self.history_s = history_s
        self.events = 0
        self.step_errors = 0
        self.evictions = Evictions()

    @property
    def dropped_sources(self) -> int:
        return self.evictions.total

    def source(self, key: str) -> SourceEvidence:
        st = self.sources.get(key)
        if st is None:
            if len(self.sources) >= self.max_sources:
                make_room(self.sources, self.evictions)
            st = self.sources[key] = SourceEvidence(
                key,
                AcceptanceStats(history_s=self.history_s),
                requests=RequestTracker(internal_prefixes=self.internal_prefixes),
            )
        return st

    def ingest(self, events: Iterable[Event], now: float, on_malformed: OnMalformed | None = None) -> int:
        """Fold decoded events in; returns how many were used. A body that fails the schema is
        counted (``on_malformed`` gets its one-line reason) and costs only itself."""
        used = 0
        groups: dict[tuple[str, int], list[tuple[Event, np.ndarray, int]]] = {}
        for ev in events:
            st = self.sources.get(ev.src) or self.source(ev.src)
            st.last_seen = now
            st.events += 1
            kind = ev.kind
            try:
                if kind == STEP:
                    n, accepted, carried = step_columns(ev.body)
                    if accepted.size == 0:
                        st._stepped(ev)
                        if self.track_requests:
                            st.requests.push(now, (ev,), accepted, _NO_ROWS)
                        used += 1
                    else:  # counted with its group below
                        g = groups.get((ev.src, n))
                        if g is None:
                            groups[(ev.src, n)] = [(ev, accepted, carried)]
                        else:
                            g.append((ev, accepted, carried))
                    continue
                if kind == HEALTH:
                    st.health = Health.from_body(ev.body)
                    st.healths += 1
                elif kind == HELLO:
                    st.hello = Hello.from_body(ev.body)
                    st.hellos += 1
                elif kind == AUX:
                    st.auxes += 1
                    st.aux = aux_view(ev)
                    st.aux_merged.add(st.aux.fingerprint)
                elif kind == PROBE:
                    st.probes += 1
                    if self.manifest is not None:
                        self._probe(st, ev, self.manifest)
                else:
                    continue
            except DecodeError as exc:
                self._malformed(st, ev, exc, on_malformed)
                continue
            except Exception as exc:  # a body the schema let through by mistake: it costs itself only
                self._malformed(
                    st, ev, DecodeError(f"unreadable {kind}: {type(exc).__name__}: {exc}"), on_malformed
                )
                continue
            used += 1
        for (key, n), items in groups.items():
            grouped = self.sources.get(key)
            if grouped is None:  # evicted within this very batch (more than max_sources sources)
                continue
            used += self._add_group(grouped, n, items, now, on_malformed)
        self.events += used
        return used

    def fold_requests(self) -> None:
        """Bring every source's request figures up to date (a few times a second, not per event)."""
        for st in self.sources.values():
            st.requests.fold()

    def _malformed(
        self, st: SourceEvidence, ev: Event, exc: Exception, on_malformed: OnMalformed | None
    ) -> None:
        if ev.kind == STEP:
            st.step_errors += 1
            self.step_errors += 1
        st.malformed += 1
        st.last_malformed = reason = printable(f"{ev.kind} seq {ev.seq}: {exc}", 200)
        if on_malformed is not None:
            on_malformed(f"{ev.src} {reason}")

    def _add_group(
        self,
        st: SourceEvidence,
        n: int,
        items: list[tuple[Event, np.ndarray, int]],
        now: float,
        on_malformed: OnMalformed | None,
    ) -> int:
        accs = [a for _, a, _ in items]
        cat = accs[0] if len(accs) == 1 else np.concatenate(accs)
        sizes = np.fromiter((a.size for a in accs), dtype=np.int64, count=len(accs))
        tokens = np.fromiter((t for _, _, t in items), dtype=np.int64, count=len(items))
        depths = step_depths([ev.body for ev, _, _ in items], n, sizes)
        if check_values(n, cat, sizes, tokens, depths):
            st.acceptance.add_many(cat, n, now, len(items), depths)
            if self.track_requests:
                st.requests.push(now, [ev for ev, _, _ in items], cat, sizes)
            st.steps += len(items)
            st.last_step_event, st._last_step = items[-1][0], None
            return len(items)
        used = 0  # rare: find the bad ones with the full per-event check
        for ev, _, _ in items:
            try:
                sv = step_view(ev)
            except DecodeError as exc:
                self._malformed(st, ev, exc, on_malformed)
                continue
            st.acceptance.add(sv.accepted, sv.n, now, sv.depths)
            if self.track_requests:
                st.requests.push(now, (ev,), sv.accepted, np.array([sv.batch]))
            st._stepped(ev, sv)
            used += 1
        return used

    @staticmethod
    def _probe(st: SourceEvidence, ev: Event, manifest: Manifest) -> None:
        """Compare a probe's rows with the manifest sample it replays (matched by input-id prefix)."""
        rows = probe_view(ev.body)  # DecodeError: counted as malformed by the caller
        try:
            cmp = compare_with_manifest(rows, manifest)
        except (ValueError, KeyError) as exc:  # a manifest sample that does not unpack
            st.probe_note = f"probe {rows.rid}: {type(exc).__name__}: {exc}"[:200]
            return
        if cmp is None:
            st.probe_note = f"probe {rows.rid}: its prompt matches none of the manifest's probe samples"
            return
        st.probe, st.probe_note = cmp, None
