"""Events on their way to the wire: a verify step, a probe request's rows, an aux sample.

Built on the serving thread from device tensors: each only starts non-blocking copies
(``deferred.HostCopy``) or a fingerprint's reduction. ``resolve()`` runs on the publisher's sender
thread: it waits for the copies and builds the body with the schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .deferred import Deferred, HostCopy
from .fingerprint import PendingFingerprint
from .schema import aux_body, probe_body, step_body


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
    """A verify step's tensors, copied asynchronously; columns are cut on the sender thread."""

    __slots__ = (
        "step",
        "rids",
        "topk",
        "dt",
        "discarded",
        "_keep",
        "_draft",
        "_accept_lens",
        "_next",
        "_retrieve",
    )

    def __init__(
        self,
        step: int,
        rids: list[str],
        topk: int,
        dt: float,
        draft: Any,
        accept_lens: Any,
        next_tokens: Any,
        retrieve: tuple[Any, Any] | None,
    ) -> None:
        self.step, self.rids, self.topk, self.dt = step, rids, topk, dt
        self.discarded = 0
        self._keep: list[bool] | None = None
        self._draft = HostCopy(draft)
        self._accept_lens = HostCopy(accept_lens)
        self._next = HostCopy(next_tokens)
        self._retrieve = None if retrieve is None else (HostCopy(retrieve[0]), HostCopy(retrieve[1]))

    def discard(self, rows: Sequence[bool]) -> None:
        """Leave out the rows the engine threw away (a request that had already finished when this
        step's result was processed); ``rows`` is one flag per row, in row order. Host-side only."""
        if len(rows) != len(self.rids) or not any(rows) or self._keep is not None:
            return
        self._keep = [not d for d in rows]
        self.discarded = len(rows) - sum(self._keep)
        self.rids = [r for r, k in zip(self.rids, self._keep, strict=True) if k]

    def resolve(self) -> dict[str, Any]:
        draft = self._draft.resolve()
        bs = len(self.rids) + self.discarded
        draft = draft.reshape(bs, -1)
        n = draft.shape[1]
        accept_lens = self._accept_lens.resolve().astype(np.int32).reshape(bs)
        nxt = self._next.resolve().reshape(bs, n)
        keep = np.arange(n)[None, :] < accept_lens[:, None]
        parents = None
        if self._retrieve is not None and self.topk > 1:
            parents = parents_from_retrieve(
                self._retrieve[0].resolve().reshape(bs, n), self._retrieve[1].resolve().reshape(bs, n)
            )
        if self._keep is not None:
            rows = np.flatnonzero(self._keep)
            draft, accept_lens, nxt = draft[rows], accept_lens[rows], nxt[rows]
            keep = keep[rows]
            parents = None if parents is None else parents[rows]
        return step_body(
            step=self.step,
            rids=self.rids,
            draft=draft,
            accept_lens=accept_lens,
            tokens=nxt[keep],
            topk=self.topk,
            parents=parents,
            dt=self.dt,
            discarded=self.discarded,
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

    def __init__(self, step: int, where: str, fp: PendingFingerprint) -> None:
        self.step, self.where, self.fp = step, where, fp

    def resolve(self) -> dict[str, Any]:
        return aux_body(self.step, self.where, self.fp.resolve())
