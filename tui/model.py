"""Monitor state: what the worker aggregates from the event stream, and the snapshots the UI draws.

Pure Python + numpy (no textual import), so it can be tested and benchmarked on its own.

Hot path (``MonitorState.ingest``) per step event: one ``step_view`` (validation + ``frombuffer``
views over the frame's bytes) and one ``AcceptanceStats.add`` (a ``bincount``). Nothing per request
runs in Python and nothing is kept per step except the latest ``StepView`` of each source, from
which the few proposal rows on screen are materialised at snapshot time. Memory is bounded: a fixed
number of sources, fixed-size acceptance counters, a fixed-length history, and the latest hello,
health and aux bodies.

Clock: ``now`` is the *receiver's* wall clock (``time.time()``) for both ``ingest`` and ``snapshot``;
steps are counted into per-second buckets at their receive time, so rates and the history do not
depend on the clocks of the remote hosts agreeing with ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from eagle3_top.tracer import diagnose as _diagnose
from eagle3_top.tracer import probe as _probe
from eagle3_top.tracer.acceptance import AcceptanceStats, AcceptanceSummary
from eagle3_top.tracer.events import (
    AUX,
    HEALTH,
    HELLO,
    PROBE,
    STEP,
    TOKEN_DTYPE,
    DecodeError,
    Event,
    StepView,
    step_view,
)

STALE_AFTER_S = 3.0
FINDINGS_EVERY_S = 1.0
MAX_SOURCES = 256
PROPOSAL_ROWS = 3


def _step_columns(b: Mapping[str, Any]) -> tuple[int, np.ndarray, int]:
    """Cheap structural checks of a step body (same rules as ``step_view``, minus value checks).

    Returns (n, accepted view, number of committed tokens carried).
    """
    batch, n = b.get("batch"), b.get("n")
    if type(batch) is not int or batch < 0:
        raise DecodeError(f"step 'batch' is {batch!r}, expected a non-negative integer")
    if type(n) is not int or n < 0:
        raise DecodeError(f"step 'n' is {n!r}, expected a non-negative integer")
    for key in ("step", "topk"):
        v = b.get(key, 0)
        if type(v) is not int or v < 0:
            raise DecodeError(f"step '{key}' is {v!r}, expected a non-negative integer")
    rids = b.get("rids")
    if type(rids) is not list or len(rids) != batch:
        raise DecodeError(f"step 'rids' must be a list of {batch} strings")
    cells = batch * n * 4
    draft = b.get("draft")
    if not isinstance(draft, (bytes, bytearray)) or len(draft) != cells:
        raise DecodeError(f"step 'draft' is not {batch}x{n} int32 values")
    parents = b.get("parents")
    if parents is not None and (not isinstance(parents, (bytes, bytearray)) or len(parents) != cells):
        raise DecodeError(f"step 'parents' is not {batch}x{n} int32 values")
    acc = b.get("accepted")
    if not isinstance(acc, (bytes, bytearray)) or len(acc) != batch * 4:
        raise DecodeError(f"step 'accepted' is not {batch} int32 values")
    tok = b.get("tokens")
    if not isinstance(tok, (bytes, bytearray)) or len(tok) % 4:
        raise DecodeError("step 'tokens' is not a whole number of int32 values")
    return n, np.frombuffer(acc, dtype=TOKEN_DTYPE), len(tok) // 4


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


@dataclass(frozen=True)
class SourceSnapshot:
    key: str  # host:pid:rN
    host: str
    pid: str
    rank: str
    engine: str
    name: str  # host:pid:rank + engine, for the table
    hello: Mapping[str, Any] | None
    health: Mapping[str, Any] | None
    aux: Mapping[str, Any] | None
    summary: AcceptanceSummary
    proposals: tuple[ProposalRow, ...]
    last_batch: int
    last_n: int
    last_topk: int
    stale: bool
    age_s: float  # seconds since the last event from this source
    received: int  # events received (transport counter)
    missed: int  # sequence holes (transport counter)
    steps: int
    step_errors: int
    hellos: int
    auxes: int
    probes: int
    findings: tuple[Any, ...] = ()  # tracer.diagnose.Finding, errors first
    findings_error: str | None = None
    layer_rows: tuple[Any, ...] = ()  # tracer.diagnose.SlotRow, with a manifest only
    probe: Any = None  # tracer.probe.ProbeComparison: the latest probe against the manifest
    probe_note: str | None = None  # why the latest probe event could not be compared


@dataclass(frozen=True)
class Snapshot:
    now: float
    sources: tuple[SourceSnapshot, ...]
    endpoints: tuple[tuple[str, str], ...] = ()
    malformed: int = 0
    last_malformed: str | None = None
    unknown_kinds: int = 0
    frames: int = 0
    bytes: int = 0
    events: int = 0

    def source(self, key: str | None) -> SourceSnapshot | None:
        for s in self.sources:
            if s.key == key:
                return s
        return None


def _split_key(key: str) -> tuple[str, str, str]:
    # host may itself contain ':' (IPv6); pid and rank are the last two fields.
    parts = key.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return key, "?", "?"


@dataclass
class SourceState:
    key: str
    stats: AcceptanceStats = field(default_factory=AcceptanceStats)
    hello: dict[str, Any] | None = None
    health: dict[str, Any] | None = None
    aux: dict[str, Any] | None = None
    last_step_event: Event | None = None  # latest valid step; parsed lazily at snapshot time
    last_step: StepView | None = None
    last_seen: float = 0.0
    events: int = 0
    steps: int = 0
    step_errors: int = 0
    hellos: int = 0
    healths: int = 0
    auxes: int = 0
    probes: int = 0
    aux_evidence: Any = None  # tracer.diagnose.AuxEvidence, fed by the (sampled) aux events
    findings: tuple[Any, ...] = ()
    findings_error: str | None = None
    findings_at: float = float("-inf")
    findings_hello: Any = None
    layer_rows: tuple[Any, ...] = ()
    probe: Any = None  # latest tracer.probe.ProbeComparison
    probe_note: str | None = None

    @property
    def engine(self) -> str:
        eng = (self.hello or {}).get("engine")
        if isinstance(eng, Mapping):
            name = eng.get("name")
            if name:
                return str(name)
        return "?"

    def latest_step(self) -> StepView | None:
        if self.last_step is None and self.last_step_event is not None:
            try:
                self.last_step = step_view(self.last_step_event)
            except DecodeError:
                self.last_step_event = None
        return self.last_step

    def proposals(self, rows: int = PROPOSAL_ROWS) -> tuple[ProposalRow, ...]:
        sv = self.latest_step()
        if sv is None or sv.batch == 0 or sv.n == 0:
            return ()
        k = min(rows, sv.batch)
        acc = sv.accepted[:k].astype(np.int64)
        # offsets of each request's committed tokens: cumsum over accepted + 1 of the rows before
        offsets = np.concatenate(([0], np.cumsum(acc + 1)[:-1]))
        out = []
        for i in range(k):
            draft = sv.draft[i]
            a = int(acc[i])
            off = int(offsets[i])
            committed = sv.tokens[off : off + a + 1]
            bonus = int(committed[a]) if committed.size > a else None
            if sv.parents is None:
                mask = tuple(j < a for j in range(sv.n - 1))
                tree = False
            else:
                mask = _tree_path(draft, sv.parents[i], committed[:a])
                tree = True
            out.append(
                ProposalRow(
                    rid=sv.rids[i],
                    root=int(draft[0]),
                    proposals=tuple(int(t) for t in draft[1:]),
                    accepted_mask=mask,
                    accepted=a,
                    bonus=bonus,
                    tree=tree,
                )
            )
        return tuple(out)


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


class MonitorState:
    """Per-source aggregates. Not thread-safe by itself: the feed serialises access with a lock."""

    def __init__(
        self,
        *,
        stale_after_s: float = STALE_AFTER_S,
        max_sources: int = MAX_SOURCES,
        history_s: int = 120,
        proposal_rows: int = PROPOSAL_ROWS,
        manifest: Any = None,
        findings_every_s: float = FINDINGS_EVERY_S,
    ) -> None:
        self.sources: dict[str, SourceState] = {}
        self.manifest = manifest  # tracer.manifest.Manifest or None
        self.findings_every_s = findings_every_s
        self.stale_after_s = stale_after_s
        self.max_sources = max_sources
        self.history_s = history_s
        self.proposal_rows = proposal_rows
        self.events = 0
        self.step_errors = 0
        self.dropped_sources = 0

    def _source(self, key: str, now: float) -> SourceState:
        st = self.sources.get(key)
        if st is None:
            if len(self.sources) >= self.max_sources:
                # Evict the source heard from least recently; bounded memory beats completeness.
                oldest = min(self.sources.values(), key=lambda s: s.last_seen)
                del self.sources[oldest.key]
                self.dropped_sources += 1
            st = self.sources[key] = SourceState(key, AcceptanceStats(history_s=self.history_s))
        return st

    def ingest(
        self,
        events: Iterable[Event],
        now: float,
        on_malformed: Callable[[str], None] | None = None,
    ) -> int:
        """Fold decoded events in; returns how many were used. Bad step columns go to on_malformed.

        Step events are validated with O(1) Python checks each (lengths and types, the same rules as
        ``step_view``); the value checks (accepted in range, committed-token count) and the counting
        run once per (source, n) group of the batch with numpy, so the per-event cost is a few dict
        lookups and one ``frombuffer``. A group that fails falls back to ``step_view`` per event to
        find and count exactly the bad ones.
        """
        used = 0
        sources = self.sources
        groups: dict[tuple[str, int], list[tuple[Event, np.ndarray, int]]] = {}
        for ev in events:
            st = sources.get(ev.src)
            if st is None:
                st = self._source(ev.src, now)
            st.last_seen = now
            st.events += 1
            kind = ev.kind
            if kind == STEP:
                try:
                    n, acc, ntok = _step_columns(ev.body)
                except DecodeError as exc:
                    self._bad_step(st, ev, exc, on_malformed)
                    continue
                if acc.size == 0:
                    st.steps += 1
                    st.last_step_event = ev
                    st.last_step = None
                    used += 1
                else:  # counted in _add_group
                    item = (ev, acc, ntok)
                    g = groups.get((ev.src, n))
                    if g is None:
                        groups[(ev.src, n)] = [item]
                    else:
                        g.append(item)
                continue
            elif kind == HEALTH:
                st.health = ev.body
                st.healths += 1
            elif kind == HELLO:
                st.hello = ev.body
                st.hellos += 1
            elif kind == AUX:
                st.aux = ev.body
                st.auxes += 1
                try:
                    if st.aux_evidence is None:
                        st.aux_evidence = _diagnose.AuxEvidence()
                    st.aux_evidence.add(ev.body)
                except Exception:
                    pass  # a malformed aux body only costs its own evidence
            elif kind == PROBE:
                st.probes += 1
                if self.manifest is not None:
                    self._probe(st, ev)
            else:
                continue
            used += 1
        for (key, n), items in groups.items():
            st = sources.get(key)
            if st is None:  # evicted within this very batch (more than max_sources sources)
                continue
            used += self._add_group(st, n, items, now, on_malformed)
        self.events += used
        return used

    def _bad_step(
        self, st: SourceState, ev: Event, exc: Exception, on_malformed: Callable[[str], None] | None
    ) -> None:
        st.step_errors += 1
        self.step_errors += 1
        if on_malformed is not None:
            on_malformed(f"{ev.src} seq {ev.seq}: {exc}")

    def _add_group(
        self,
        st: SourceState,
        n: int,
        items: list[tuple[Event, np.ndarray, int]],
        now: float,
        on_malformed: Callable[[str], None] | None,
    ) -> int:
        accs = [a for _, a, _ in items]
        cat = accs[0] if len(accs) == 1 else np.concatenate(accs)
        ok = int(cat.min()) >= 0 and int(cat.max()) < max(n, 1)
        if ok:
            sizes = np.fromiter((a.size for a in accs), dtype=np.int64, count=len(accs))
            starts = np.zeros(len(accs), dtype=np.int64)
            np.cumsum(sizes[:-1], out=starts[1:])
            expected = np.add.reduceat(cat, starts, dtype=np.int64) + sizes
            got = np.fromiter((t for _, _, t in items), dtype=np.int64, count=len(items))
            ok = bool(np.array_equal(expected, got))
        if ok:
            st.stats.add_many(cat, n, now, len(items))
            st.steps += len(items)
            st.last_step_event = items[-1][0]
            st.last_step = None
            return len(items)
        used = 0  # rare: find the bad ones with the reference parser
        for ev, _, _ in items:
            try:
                sv = step_view(ev)
            except DecodeError as exc:
                self._bad_step(st, ev, exc, on_malformed)
                continue
            st.stats.add(sv.accepted, sv.n, now)
            st.steps += 1
            st.last_step_event = ev
            st.last_step = sv
            used += 1
        return used

    def _probe(self, st: SourceState, ev: Event) -> None:
        """Compare a probe's rows with the manifest probe it replays (matched by input-id prefix)."""
        try:
            rows = _probe.decode_probe(ev.body)
            cmp = _probe.compare_with_manifest(rows, self.manifest)
        except Exception as exc:  # a malformed probe only costs its own comparison
            st.probe_note = f"probe {ev.body.get('rid')!r}: {type(exc).__name__}: {exc}"[:200]
            return
        if cmp is None:
            st.probe_note = f"probe {rows.rid}: its prompt matches none of the manifest's probe samples"
            return
        st.probe, st.probe_note = cmp, None

    def _findings(self, st: SourceState, now: float) -> None:
        """Run the tracer's diagnosis on what this source has shown, at most once a second."""
        if st.hello is None:
            return
        if st.findings_hello is st.hello and now - st.findings_at < self.findings_every_s:
            return
        st.findings_at, st.findings_hello = now, st.hello
        try:
            ev = _diagnose.SourceEvidence(st.key)
            ev.hello = st.hello
            if st.aux_evidence is not None:
                ev.aux = st.aux_evidence
            ev.acceptance = st.stats  # read only
            ev.steps = st.steps
            order = {"error": 0, "warning": 1, "info": 2}
            found = _diagnose.diagnose(ev, self.manifest)
            st.findings = tuple(sorted(found, key=lambda f: order.get(getattr(f, "severity", ""), 3)))
            st.findings_error = None
            if self.manifest is not None:
                st.layer_rows = tuple(
                    _diagnose.layer_map(st.hello, ev.aux.fields(), ev.aux.rows, self.manifest)
                )
        except Exception as exc:
            st.findings_error = f"diagnosis failed: {type(exc).__name__}: {exc}"[:200]

    def snapshot(
        self,
        now: float,
        *,
        transport: Mapping[str, tuple[int, int]] | None = None,
        endpoints: Mapping[str, str] | None = None,
        malformed: int = 0,
        last_malformed: str | None = None,
        unknown_kinds: int = 0,
        frames: int = 0,
        nbytes: int = 0,
    ) -> Snapshot:
        """Immutable view for the UI. ``transport`` maps src -> (received, missed)."""
        out = []
        transport = transport or {}
        for key, st in self.sources.items():
            host, pid, rank = _split_key(key)
            engine = st.engine
            received, missed = transport.get(key, (st.events, 0))
            age = max(0.0, now - st.last_seen)
            sv = st.latest_step()
            self._findings(st, now)
            out.append(
                SourceSnapshot(
                    key=key,
                    host=host,
                    pid=pid,
                    rank=rank,
                    engine=engine,
                    name=f"{key} {engine}",
                    hello=st.hello,
                    health=st.health,
                    aux=st.aux,
                    summary=st.stats.summary(now),
                    proposals=st.proposals(self.proposal_rows),
                    last_batch=sv.batch if sv else 0,
                    last_n=sv.n if sv else 0,
                    last_topk=sv.topk if sv else 0,
                    stale=age > self.stale_after_s,
                    age_s=age,
                    received=received,
                    missed=missed,
                    steps=st.steps,
                    step_errors=st.step_errors,
                    hellos=st.hellos,
                    auxes=st.auxes,
                    probes=st.probes,
                    findings=st.findings,
                    findings_error=st.findings_error,
                    layer_rows=st.layer_rows,
                    probe=st.probe,
                    probe_note=st.probe_note,
                )
            )
        return Snapshot(
            now=now,
            sources=tuple(out),
            endpoints=tuple((endpoints or {}).items()),
            malformed=malformed,
            last_malformed=last_malformed,
            unknown_kinds=unknown_kinds,
            frames=frames,
            bytes=nbytes,
            events=self.events,
        )
