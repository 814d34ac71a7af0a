"""Per-request figures of one source: which requests are in flight, how far each got, how well its
drafts were accepted, and the accept length of each of its steps for the ones being looked at.

Cost: nothing per request on the ingest path. Step events are parked as they come (one list append
per event) and folded in a few times a second, many events at once: the request ids of all of them
are looked up in one ``map`` over a dict and the counters move with ``np.bincount``. Python runs per
*new* request only. Memory is bounded: at most ``max_requests`` requests per source (the finished
ones heard from least recently are forgotten first), a bounded backlog between folds (what overflows
it is counted, never silently missing), and the last ``recent`` step events kept whole for the
step-by-step view of one request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
from eagle3_top.tracer.schema import BONUS, TOKEN_DTYPE, Event, rid_text, rid_texts

# SGLang's own requests that are not users': /health_generate sends rid "HEALTH_CHECK_<uuid>".
INTERNAL_PREFIXES: tuple[str, ...] = ("HEALTH_CHECK",)
MAX_REQUESTS = 4096
MAX_BACKLOG_ROWS = 1 << 18  # request-steps parked between two folds
RECENT_STEPS = 64  # step events kept whole, for the step-by-step view
MAX_LENS = 4096  # accept lengths kept per watched request
# A request that was in one of the source's last few verify steps is running; it may miss one
# (a step that only prefilled, a retracted and resumed request).
IN_FLIGHT_STEPS = 2


@dataclass(frozen=True)
class RequestTable:
    """Every request one source's tracker knows, copied out (column arrays, one row per request)."""

    rids: tuple[str, ...]
    internal: np.ndarray  # bool
    in_flight: np.ndarray  # bool
    tokens: np.ndarray  # committed over the verify steps seen (accepted drafts + the bonus each)
    steps: np.ndarray  # verify steps it was in
    accepted: np.ndarray  # accepted draft tokens, summed
    last_len: np.ndarray  # accept length of its latest step
    first_seen: np.ndarray  # receive time of its first step seen
    last_seen: np.ndarray
    since: float | None  # when the tracker started (or started over)
    forgotten: int  # finished requests dropped to bound memory
    overflowed: int  # request-steps lost because the backlog overflowed between folds

    def __len__(self) -> int:
        return len(self.rids)

    @property
    def mean_accept_length(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            out: np.ndarray = np.where(self.steps > 0, self.tokens / np.maximum(self.steps, 1), 0.0)
        return out


EMPTY_TABLE = RequestTable(
    rids=(),
    internal=np.zeros(0, bool),
    in_flight=np.zeros(0, bool),
    tokens=np.zeros(0, np.int64),
    steps=np.zeros(0, np.int64),
    accepted=np.zeros(0, np.int64),
    last_len=np.zeros(0, np.int64),
    first_seen=np.zeros(0),
    last_seen=np.zeros(0),
    since=None,
    forgotten=0,
    overflowed=0,
)


class _SharedRefs(deque[tuple[float, Event]]):
    """Events are never changed once decoded: a copy of the book (a replay checkpoint) shares them
    instead of copying each body."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedRefs:
        return _SharedRefs(self, maxlen=self.maxlen)


_Parked = tuple[float, list[list[Any]], np.ndarray, np.ndarray]


class _Backlog(list[_Parked]):
    """Parked groups: each event's rid list as the wire had it, and columns the book never
    changes. A copy of the book shares them: a checkpoint copies no wire data."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _Backlog:
        return _Backlog(self)


class RequestTracker:
    """The requests of one source. Not thread-safe: the caller serialises (the book's lock)."""

    def __init__(
        self,
        *,
        max_requests: int = MAX_REQUESTS,
        internal_prefixes: Sequence[str] = INTERNAL_PREFIXES,
        recent: int = RECENT_STEPS,
    ) -> None:
        self.max_requests = max_requests
        self.internal_prefixes = tuple(internal_prefixes)
        # (receive time, each event's rids, the group's accepted column, each event's size) per parked
        # group of step events: only what the fold reads, taken as the book already has it, so the
        # ingest path does one list element per event and a parked event's draft and token bins are
        # freed at once (holding whole events until the fold kept every decoded frame alive and cost
        # ingest ~40%: its memory was never reused warm).
        self._backlog = _Backlog()
        self._backlog_rows = 0
        self._parked: _SharedRefs = _SharedRefs(maxlen=recent)  # the whole events 'recent' will get
        self.recent: _SharedRefs = _SharedRefs(maxlen=recent)  # (receive time, step event)
        self.index: dict[str, int] = {}
        self._rids: list[str] = []
        self._internal = np.zeros(0, bool)
        self._cols = np.zeros((6, 0), np.float64)  # steps tokens accepted last_len first last
        self._last_event = np.zeros(0, np.int64)  # the source's step-event count when last seen
        self.events = 0  # step events folded
        self.since: float | None = None
        self.forgotten = 0
        self.overflowed = 0
        self.watched: dict[str, deque[int]] = {}  # rid -> accept length per step, while looked at

    # -- ingest side: O(1) per event -------------------------------------------------------------

    def push(self, now: float, events: Sequence[Event], accepted: np.ndarray, sizes: np.ndarray) -> None:
        """Park step events received at ``now`` until the next fold: their accepted columns
        concatenated (``accepted``, request after request) and each one's batch (``sizes``)."""
        rows = int(accepted.size)
        if self._backlog_rows + rows > MAX_BACKLOG_ROWS:
            self.overflowed += rows
            return
        self._backlog_rows += rows
        self._backlog.append((now, [ev.body["rids"] for ev in events], accepted, sizes))
        maxlen = self._parked.maxlen or 0
        self._parked.extend((now, ev) for ev in events[-maxlen:])

    # -- fold: a few times a second --------------------------------------------------------------

    def fold(self) -> int:
        """Count the parked events in; returns how many were folded."""
        backlog, self._backlog, self._backlog_rows = self._backlog, _Backlog(), 0
        if not backlog:
            return 0
        if self.since is None:
            self.since = backlog[0][0]
        rids: list[Any] = []
        accepted: list[np.ndarray] = []
        t_all_parts: list[np.ndarray] = []
        ev_all_parts: list[np.ndarray] = []
        self.recent.extend(self._parked)  # the last ``recent`` of the parked events, in order
        self._parked.clear()
        folded = sum(len(g[1]) for g in backlog)
        for now, rid_lists, acc, sizes in backlog:  # per group: the arrays are joined once below
            first = self.events + 1
            self.events += len(rid_lists)
            if not acc.size:
                continue
            for r in rid_lists:
                rids.extend(r)
            accepted.append(acc)
            t_all_parts.append(np.full(acc.size, now))
            ev_all_parts.append(np.repeat(np.arange(first, self.events + 1, dtype=np.int64), sizes))
        if not rids:
            return folded
        t_all = np.concatenate(t_all_parts)
        idx = self._indices(rids, t_all)
        acc_all = np.concatenate(accepted).astype(np.int64)
        ev_all = np.concatenate(ev_all_parts)
        lens = acc_all + BONUS
        c = self._cols
        size = c.shape[1]
        # bincount, not np.add.at: the same sums, several times faster on repeated indices
        c[0] += np.bincount(idx, minlength=size)
        c[1] += np.bincount(idx, weights=lens, minlength=size)
        c[2] += np.bincount(idx, weights=acc_all, minlength=size)
        # the latest of each request's steps in this fold: its last occurrence
        uniq, first_rev = np.unique(idx[::-1], return_index=True)
        last_pos = len(idx) - 1 - first_rev
        c[3][uniq] = lens[last_pos]
        c[5][uniq] = t_all[last_pos]
        self._last_event[uniq] = ev_all[last_pos]
        for rid, hist in self.watched.items():
            j = self.index.get(rid)
            if j is not None:
                hist.extend((lens[idx == j]).tolist())
        if len(self._rids) > self.max_requests:
            self._forget()
        return folded

    def _indices(self, rids: list[Any], times: np.ndarray) -> np.ndarray:
        try:
            found = list(map(self.index.get, rids, repeat(-1)))
        except TypeError:  # an unhashable rid off the wire: named as text, like any odd rid
            rids[:] = rid_texts(rids)
            found = list(map(self.index.get, rids, repeat(-1)))
        if -1 in found:
            first: list[float] = []
            for i in [i for i, j in enumerate(found) if j == -1]:
                # A request is known by its rid as shown (rid_text), so that no escape sequence
                # reaches a view; only a rid not seen before, or one that needed escaping, gets here.
                rid = rid_text(rids[i])
                j = self.index.get(rid)
                if j is None:
                    j = self.index[rid] = len(self._rids)
                    self._rids.append(rid)
                    first.append(float(times[i]))
                found[i] = j
            self._grow(first)
        return np.asarray(found, dtype=np.int64)

    def _grow(self, first_seen: list[float]) -> None:
        n_old, n = self._cols.shape[1], len(self._rids)
        if n == n_old:
            return
        extra = n - n_old
        cols = np.zeros((6, extra))
        cols[4] = first_seen
        cols[5] = first_seen
        self._cols = np.concatenate([self._cols, cols], axis=1)
        self._last_event = np.concatenate([self._last_event, np.zeros(extra, np.int64)])
        internal = np.fromiter(
            (r.startswith(self.internal_prefixes) for r in self._rids[n_old:]), dtype=bool, count=extra
        )
        self._internal = np.concatenate([self._internal, internal])

    def _forget(self) -> None:
        """Keep the running requests and the most recently heard finished ones: 3/4 of the room."""
        keep_n = self.max_requests * 3 // 4
        running = self._last_event > self.events - IN_FLIGHT_STEPS
        order = np.lexsort((self._cols[5], running))  # finished first, oldest first
        drop = order[: max(0, len(self._rids) - keep_n)]
        keep = np.ones(len(self._rids), bool)
        keep[drop] = False
        keep |= running
        self.forgotten += int((~keep).sum())
        self._rids = [r for r, k in zip(self._rids, keep.tolist(), strict=True) if k]
        self.index = {r: i for i, r in enumerate(self._rids)}
        self._cols = self._cols[:, keep]
        self._last_event = self._last_event[keep]
        self._internal = self._internal[keep]

    # -- read side -------------------------------------------------------------------------------

    def table(self) -> RequestTable:
        c = self._cols
        return RequestTable(
            rids=tuple(self._rids),
            internal=self._internal.copy(),
            in_flight=self._last_event > self.events - IN_FLIGHT_STEPS,
            tokens=c[1].astype(np.int64),
            steps=c[0].astype(np.int64),
            accepted=c[2].astype(np.int64),
            last_len=c[3].astype(np.int64),
            first_seen=c[4].copy(),
            last_seen=c[5].copy(),
            since=self.since,
            forgotten=self.forgotten,
            overflowed=self.overflowed,
        )

    def watch(self, rids: Iterable[str]) -> None:
        """Keep the accept length of every step of these requests from now on (and of the steps
        still among the recent events); stop keeping it for the others."""
        want = set(rids)
        for rid in list(self.watched):
            if rid not in want:
                del self.watched[rid]
        for rid in want - set(self.watched):
            hist: deque[int] = deque(maxlen=MAX_LENS)
            for _, ev in self.recent:
                i = _row_of(ev, rid)
                if i is not None:
                    hist.append(int(np.frombuffer(ev.body["accepted"], dtype=TOKEN_DTYPE)[i]) + BONUS)
            self.watched[rid] = hist

    def steps_of(self, rid: str) -> list[tuple[float, Event, int]]:
        """The recent step events that hold ``rid``: (receive time, event, its row)."""
        out = []
        for now, ev in self.recent:
            i = _row_of(ev, rid)
            if i is not None:
                out.append((now, ev, i))
        return out


def _row_of(ev: Event, rid: str) -> int | None:
    """The row of ``rid`` (a rid as shown, ``rid_text``) in a step event, None if it is not there."""
    rids = ev.body.get("rids")
    if type(rids) is not list:
        return None
    try:
        return rids.index(rid)
    except ValueError:
        pass
    shown = rid_texts(rids)  # the wire's rids as shown: the same list unless one needed escaping
    try:
        return None if shown == rids else shown.index(rid)
    except ValueError:
        return None
