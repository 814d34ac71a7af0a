"""Events on their way to the wire: a verify step, a probe request's rows, an aux sample.

Built on the serving thread from device tensors: each only starts non-blocking copies
(``deferred.HostCopy``) or a fingerprint's reduction. ``resolve()`` runs on the publisher's sender
thread: it waits for the copies and builds the body with the schema.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
from eagle3_top.tracer.schema import aux_body, probe_body, step_body
from eagle3_top.tracer.serving.deferred import Deferred, HostCopy, Span
from eagle3_top.tracer.serving.fingerprint import PendingFingerprint, SnapshotFingerprint

_RID = operator.attrgetter("rid")
_COLUMNS: dict[int, np.ndarray] = {}  # [1, n] column indices, by verify width (a handful of widths)


def parents_from_retrieve(next_token: np.ndarray, next_sibling: np.ndarray) -> np.ndarray:
    """Parent index of each node in a block, from SGLang's first-child / next-sibling links."""
    bs, n = next_token.shape
    parents = np.full((bs, n), -1, dtype=np.int32)
    for b in range(bs):
        stack = [0]
        while stack:
            node = stack.pop()
            child = int(next_token[b, node])
            while 0 <= child < n:
                parents[b, child] = node
                stack.append(child)
                child = int(next_sibling[b, child])
    return parents


class DeferredStep(Deferred):
    """A verify step's tensors, copied asynchronously; columns are cut on the sender thread.

    ``rows`` are the step's requests in row order: rid strings, or the engine's request objects,
    whose ``rid`` is read on the sender thread (a list of 32 ``str(r.rid)`` is microseconds the
    serving thread need not spend). With ``late=True`` only the draft is copied now; the accept
    lengths and committed tokens come later, from the engine's own host copies (``supply``) or, if
    it makes none, from a copy started when the step is published (``copy_late``)."""

    __slots__ = (
        "step",
        "topk",
        "dt",
        "discarded",
        "_rows",
        "_keep",
        "_draft",
        "_accept_lens",
        "_next",
        "_retrieve",
        "_late",
        "shape",
    )

    def __init__(
        self,
        step: int,
        rows: Sequence[Any],
        topk: int,
        dt: float,
        draft: Any,
        accept_lens: Any,
        next_tokens: Any,
        retrieve: tuple[Any, Any] | None,
        *,
        late: bool = False,
        seal_later: bool = False,
    ) -> None:
        self.step, self.topk, self.dt = step, topk, dt
        self._rows = rows
        self.discarded = 0
        self._keep: list[bool] | None = None
        # (rows, draft tokens per row): host-side metadata, for checking what the engine supplies
        self.shape = (len(rows), int(draft.numel()) // max(len(rows), 1))
        # seal_later: no event after the draft's copy now; the engine's own event for its copies,
        # which follows ours in stream order, is bound in ``supply`` (or one is recorded then)
        self._draft = HostCopy(draft, record=not seal_later)
        self._late: tuple[Any, Any] | None = None
        self._accept_lens: Deferred | None = None
        self._next: Deferred | None = None
        if late:
            self._late = (accept_lens, next_tokens)
        else:
            self._accept_lens, self._next = HostCopy(accept_lens), HostCopy(next_tokens)
        self._retrieve = None if retrieve is None else (HostCopy(retrieve[0]), HostCopy(retrieve[1]))

    @property
    def rows(self) -> int:
        """Rows that will be published (after ``discard``)."""
        return len(self._rows) - self.discarded

    @property
    def rids(self) -> list[str]:
        """The published rows' rids (reads the request objects: call on the sender thread)."""
        rows = self._rows
        # C-level maps: this runs for every row of every step, on the thread that shares the GIL
        rids = list(rows) if rows and isinstance(rows[0], str) else list(map(str, map(_RID, rows)))
        if self._keep is not None:
            rids = [r for r, k in zip(rids, self._keep, strict=True) if k]
        return rids

    def same_rows(self, reqs: Sequence[Any]) -> bool:
        """Whether ``reqs`` are this step's requests, in the same order (identity: no rid reads)."""
        rows = self._rows
        # list equality tries identity first, element by element, in C (SGLang's Req has no __eq__)
        return len(reqs) == len(rows) and (reqs if type(reqs) is list else list(reqs)) == rows

    @property
    def late(self) -> bool:
        """Still waiting for its accept lengths and tokens (``supply`` or ``copy_late``)."""
        return self._late is not None

    def supply(self, accept_lens: Deferred, next_tokens: Deferred, ready: Any = None) -> None:
        """The engine's own host copies of the accept lengths and committed tokens; ``ready``: the
        engine's event after them, which also follows this step's draft copy in stream order."""
        self._accept_lens, self._next, self._late = accept_lens, next_tokens, None
        if ready is not None:
            self._draft.bind(ready)

    def seal(self) -> None:
        """Events for copies that still have none (``seal_later`` without a ``supply``)."""
        self._draft.seal()

    def copy_late(self) -> None:
        """Copy the accept lengths and tokens now, ordered after the draft's copy on whatever stream is
        current: the draft's event follows the verify that produced them (a device-side wait, no host
        sync)."""
        if self._late is None:
            return
        acc, nxt = self._late
        self._draft.order_after()  # seals the draft's copy first if it has no event yet
        self._accept_lens, self._next, self._late = HostCopy(acc), HostCopy(nxt), None

    def discard(self, rows: Sequence[bool]) -> None:
        """Leave out the rows the engine threw away (a request that had already finished when this
        step's result was processed); ``rows`` is one flag per row, in row order. Host-side only."""
        if len(rows) != len(self._rows) or not any(rows) or self._keep is not None:
            return
        self._keep = [not d for d in rows]
        self.discarded = len(rows) - sum(self._keep)

    def ready(self) -> bool:
        """Every copy this step needs has landed on the host (a non-blocking look at the events)."""
        if self._accept_lens is None or self._next is None:
            return False
        if not (self._draft.ready() and self._accept_lens.ready() and self._next.ready()):
            return False
        return self._retrieve is None or (self._retrieve[0].ready() and self._retrieve[1].ready())

    def host_spans(self) -> StepSpansOnHost:
        """The step's host columns as they lie (pinned or engine buffers, not copied), as spans
        (address, sizes, type char: ``deferred.Span``) for the ring's ``memmove``s: no numpy object
        per column per step on the serving thread. Call once ``ready()``, copy them out, then
        ``release()``."""
        if self._accept_lens is None or self._next is None:
            raise RuntimeError("a step read before its accept lengths were supplied")
        retrieve = None
        if self._retrieve is not None and self.topk > 1:
            retrieve = (self._retrieve[0].span(), self._retrieve[1].span())
        keep = None if self._keep is None else bytes(self._keep)
        return self._draft.span(), self._accept_lens.span(), self._next.span(), retrieve, keep

    def rid_text(self) -> tuple[str, int]:
        """The published rows' rids joined by NUL, and how many there are: with no row discarded,
        joined straight from the rows (no list of rids in between)."""
        if self._keep is not None:
            rids = self.rids
            return "\0".join(rids), len(rids)
        rows = self._rows
        if rows and isinstance(rows[0], str):
            return "\0".join(rows), len(rows)
        return "\0".join(map(str, map(_RID, rows))), len(rows)

    def release(self) -> None:
        """Give the pinned buffers back once the host columns have been copied out."""
        self._draft.release()
        for d in (self._accept_lens, self._next, *(self._retrieve or ())):
            if isinstance(d, HostCopy):
                d.release()

    def resolve(self) -> dict[str, Any]:
        if self._accept_lens is None or self._next is None:
            raise RuntimeError("a step published before its accept lengths were supplied")
        retrieve = None
        if self._retrieve is not None and self.topk > 1:
            retrieve = (self._retrieve[0].resolve(), self._retrieve[1].resolve())
        return step_fields(
            step=self.step,
            rids=self.rids,
            draft=self._draft.resolve(),
            accept_lens=self._accept_lens.resolve(),
            next_tokens=self._next.resolve(),
            topk=self.topk,
            retrieve=retrieve,
            keep=self._keep,
            dt=self.dt,
            discarded=self.discarded,
        )


# draft, accept lengths, committed tokens, tree links (top-k > 1) as spans; kept-row flags
StepSpansOnHost = tuple[Span, Span, Span, "tuple[Span, Span] | None", "bytes | None"]


def step_fields(
    *,
    step: int,
    rids: Sequence[str],
    draft: np.ndarray,
    accept_lens: np.ndarray,
    next_tokens: np.ndarray,
    topk: int,
    retrieve: tuple[np.ndarray, np.ndarray] | None,
    keep: Sequence[bool] | bytes | None,
    dt: float,
    discarded: int,
) -> dict[str, Any]:
    """A step body from the engine's host arrays as the verify left them (every row; ``keep``
    flags the rows to publish, ``rids`` are those rows' only). The sender thread and the sidecar
    both build the wire's body here."""
    bs = len(accept_lens)
    draft = draft.reshape(bs, -1)
    n = draft.shape[1]
    accept_lens = np.asarray(accept_lens, dtype=np.int32).reshape(bs)
    nxt = next_tokens.reshape(bs, n)
    cols = _COLUMNS.get(n)
    if cols is None:
        cols = _COLUMNS[n] = np.arange(n)[None, :]
    committed = cols < accept_lens[:, None]
    parents = None
    if retrieve is not None and topk > 1:
        parents = parents_from_retrieve(retrieve[0].reshape(bs, n), retrieve[1].reshape(bs, n))
    if keep is not None:
        rows = np.flatnonzero(np.frombuffer(bytes(keep), dtype=np.bool_))
        draft, accept_lens, nxt = draft[rows], accept_lens[rows], nxt[rows]
        committed = committed[rows]
        parents = None if parents is None else parents[rows]
    return step_body(
        step=step,
        rids=rids,
        draft=draft,
        accept_lens=accept_lens,
        tokens=nxt[committed],
        topk=topk,
        parents=parents,
        dt=dt,
        discarded=discarded,
    )


class DeferredProbe(Deferred):
    """A probe request's prefill aux rows on their way to the host; cut into a body on the sender."""

    __slots__ = ("rid", "slot_width", "offset", "_rows", "_ids")

    def __init__(self, rid: str, rows: Any, input_ids: Any, slot_width: int, offset: int) -> None:
        self.rid, self.slot_width, self.offset = rid, slot_width, offset
        self._rows = HostCopy(rows)
        self._ids = input_ids if isinstance(input_ids, (list, tuple, np.ndarray)) else HostCopy(input_ids)

    def resolve(self) -> dict[str, Any]:
        rows = self._rows.resolve()
        ids = self._ids.resolve() if isinstance(self._ids, HostCopy) else np.asarray(self._ids)
        width = rows.shape[-1]
        slot_width = self.slot_width if self.slot_width and width % self.slot_width == 0 else width
        return probe_body(
            rid=self.rid,
            rows=rows.reshape(-1, width),
            slots=width // slot_width,
            slot_width=slot_width,
            offset=self.offset,
            input_ids=ids,
        )


class DeferredAux(Deferred):
    __slots__ = ("step", "where", "fp")

    def __init__(self, step: int, where: str, fp: PendingFingerprint | SnapshotFingerprint) -> None:
        self.step, self.where, self.fp = step, where, fp

    def resolve(self) -> dict[str, Any]:
        return aux_body(self.step, self.where, self.fp.resolve())


class ChainStep(Deferred):
    """A verify step of a chain (top-k 1) whose tokens the engine already holds on the host as
    lists, one row per request (vLLM): its drafts, the tokens it committed (accepted drafts and the
    bonus) and the token before them (the root; -1 where the adapter has not seen one). Rows with
    fewer drafts than the widest are padded with -1, vLLM's own placeholder id, which is never
    accepted. Arrays are built on the sender thread."""

    __slots__ = ("step", "dt", "rows")

    def __init__(self, step: int, rows: list[tuple[str, int, Sequence[int], list[int]]], dt: float) -> None:
        self.step, self.dt, self.rows = step, dt, rows  # (rid, root, drafts, committed)

    def resolve(self) -> dict[str, Any]:
        rows = self.rows
        n = 1 + max(len(d) for _, _, d, _ in rows)
        draft = np.full((len(rows), n), -1, dtype=np.int32)
        for i, (_, root, drafts, _) in enumerate(rows):
            draft[i, 0] = root
            draft[i, 1 : 1 + len(drafts)] = drafts
        committed = [c for _, _, _, c in rows]
        return step_body(
            step=self.step,
            rids=[r for r, _, _, _ in rows],
            draft=draft,
            accept_lens=np.fromiter(map(len, committed), dtype=np.int32, count=len(rows)),
            tokens=np.fromiter((t for c in committed for t in c), dtype=np.int32),
            dt=self.dt,
        )
