"""The tracer: what an engine adapter's hooks hand over, turned into events on the publisher.

Engine adapters (``hooks/``: the built-in engine, SGLang) extract tensors at their read points and
call ``Tracer.make_step`` / ``record_aux`` / ``record_probe``. Those calls only start device-to-host
copies and queue a deferred event; the bodies are built (``schema``) on the publisher's sender
thread. Every hook is guarded: an exception is counted and reported in health events, and after
``max_errors`` the tracer switches itself off, says so once in the log, and the engine goes on.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .deferred import Deferred, HostCopy
from .fingerprint import PendingFingerprint, fingerprint
from .publisher import MemoryPublisher, Publisher
from .schema import AUX, PROBE, STEP, aux_body, is_probe_rid, probe_body, step_body

log = logging.getLogger("eagle3_top.tracer")

F = TypeVar("F", bound=Callable[..., Any])


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


class Tracer:
    """Feeds one publisher from an engine's hooks; never raises into the engine."""

    PAUSE_CHECK_S = 0.5  # how often the pause file is looked for (a stat per check)

    def __init__(
        self,
        publisher: Publisher | MemoryPublisher,
        *,
        aux_interval_s: float = 0.5,
        max_errors: int = 20,
        pause_file: str | None = None,
    ) -> None:
        self.publisher = publisher
        self.aux_interval_s = aux_interval_s
        self.max_errors = max_errors
        self.enabled = True
        self.pause_file = pause_file
        self._paused = False
        self._next_pause_check = 0.0
        self.steps = 0
        self._next_aux = 0.0
        self._slot_width: int | None = None
        self._hooks: dict[Callable[..., Any], Callable[..., Any]] = {}

    @property
    def recording(self) -> bool:
        """Enabled and not paused. While ``pause_file`` exists nothing is recorded (health events go
        on, saying ``paused``): tracing is switched off and on without a restart, and the same
        server can be measured with and without it."""
        if not self.enabled:
            return False
        if self.pause_file is None:
            return True
        now = time.monotonic()
        if now >= self._next_pause_check:
            self._next_pause_check = now + self.PAUSE_CHECK_S
            self._paused = os.path.exists(self.pause_file)
            self.publisher.paused = self._paused
        return not self._paused

    # -- guard -----------------------------------------------------------------------------------

    def guarded(self, fn: F) -> F:
        """Wrap a hook body: exceptions are counted, never propagated."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return None
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                self.hook_failed(exc)
                return None

        return wrapper  # type: ignore[return-value]

    def hook(self, fn: F) -> F:
        """``guarded(fn)``, built once per function (hooks call it on every step)."""
        g = self._hooks.get(fn)
        if g is None:
            g = self._hooks[fn] = self.guarded(fn)
        return g  # type: ignore[return-value]

    def hook_failed(self, exc: BaseException) -> None:
        self.publisher.count_hook_error(exc)
        if self.publisher.hook_errors >= self.max_errors and self.enabled:
            self.enabled = False
            self.publisher.disabled = True
            log.error(
                "eagle3-top: tracer disabled after %d hook errors (last: %s); the engine is unaffected",
                self.publisher.hook_errors,
                self.publisher.last_error,
            )

    # -- records ---------------------------------------------------------------------------------

    def set_slot_width(self, width: int) -> None:
        """The target's hidden size: aux slots are counted from what arrives, not from config."""
        self._slot_width = width

    def make_step(
        self,
        rids: Sequence[str],
        draft: Any,
        accept_lens: Any,
        next_tokens: Any,
        *,
        topk: int = 1,
        retrieve: tuple[Any, Any] | None = None,
        dt: float = 0.0,
    ) -> DeferredStep | None:
        """One verify step whose copies have started, to publish now or once the engine has judged
        its rows (``DeferredStep.discard``, then ``publish_step``). None for an idle batch.
        ``accept_lens`` counts the bonus token (SGLang's convention)."""
        if not rids:
            return None
        step = self.steps
        self.steps = step + 1
        return DeferredStep(step, list(rids), topk, dt, draft, accept_lens, next_tokens, retrieve)

    def publish_step(self, step: DeferredStep | None) -> None:
        if step is None:
            return
        if step.discarded:
            self.publisher.discarded_rows += step.discarded
        if step.rids:  # every row discarded (a batch that had all finished): no step to count
            self.publisher.publish(STEP, step)

    def want_aux(self) -> bool:
        now = time.monotonic()
        if now < self._next_aux:
            return False
        self._next_aux = now + self.aux_interval_s
        return True

    def record_aux(self, hidden: Any, where: str = "fc_input") -> None:
        """Fingerprint the aux states a draft consumed (call only when ``want_aux()`` said so)."""
        width = self._slot_width or hidden.shape[-1]
        fp = fingerprint(hidden, max(hidden.shape[-1] // width, 1))
        self.publisher.publish(AUX, _AuxBody(self.steps, where, fp))

    @staticmethod
    def is_probe(rid: Any) -> bool:
        """Requests marked as probes (``schema.PROBE_MARKER`` in the rid) get their rows published."""
        return is_probe_rid(rid)

    def record_probe(self, rid: str, rows: Any, input_ids: Any, offset: int = 0) -> None:
        """A probe request's prefill aux rows ``[rows, slots * hidden]`` (the draft's ``fc`` input) and
        the prompt ids they belong to, from prompt position ``offset``. Starts copies only."""
        width = self._slot_width or rows.shape[-1]
        self.publisher.publish(PROBE, DeferredProbe(str(rid), rows, input_ids, width, int(offset)))


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


class _AuxBody(Deferred):
    __slots__ = ("step", "where", "fp")

    def __init__(self, step: int, where: str, fp: PendingFingerprint) -> None:
        self.step, self.where, self.fp = step, where, fp

    def resolve(self) -> dict[str, Any]:
        return aux_body(self.step, self.where, self.fp.resolve())
