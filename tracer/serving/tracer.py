"""The tracer: what an engine adapter's hooks hand over, turned into events on the publisher.

Engine adapters (``hooks/``: the built-in engine, SGLang) extract tensors at their read points and
call ``Tracer.make_step`` / ``record_aux`` / ``record_probe``. Those calls only start device-to-host
copies and queue a deferred event (``pending``); the bodies are built on the publisher's sender
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

from eagle3_top.tracer.schema import AUX, PROBE, STEP, is_probe_rid
from eagle3_top.tracer.serving.fingerprint import fingerprint_snapshot
from eagle3_top.tracer.serving.pending import DeferredAux, DeferredProbe, DeferredStep
from eagle3_top.tracer.serving.publisher import MemoryPublisher, Publisher

log = logging.getLogger("eagle3_top.tracer")

F = TypeVar("F", bound=Callable[..., Any])


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
        rows: Sequence[Any],
        draft: Any,
        accept_lens: Any,
        next_tokens: Any,
        *,
        topk: int = 1,
        retrieve: tuple[Any, Any] | None = None,
        dt: float = 0.0,
        late: bool = False,
        seal_later: bool = False,
    ) -> DeferredStep | None:
        """One verify step whose copies have started, to publish now or once the engine has judged
        its rows (``DeferredStep.discard``, then ``publish_step``). None for an idle batch.
        ``rows``: rids or request objects with a ``rid``, in row order. ``accept_lens`` counts the
        bonus token (SGLang's convention). ``late``: copy only the draft now; the engine's own host
        copies of the rest are supplied before publishing (``DeferredStep.supply``), and with
        ``seal_later`` the event they come with stands for the draft copy's too."""
        if not rows:
            return None
        step = self.steps
        self.steps = step + 1
        return DeferredStep(
            step, rows, topk, dt, draft, accept_lens, next_tokens, retrieve, late=late, seal_later=seal_later
        )

    def publish_step(self, step: DeferredStep | None) -> None:
        if step is None:
            return
        if step.late:
            step.copy_late()
        step.seal()
        if step.discarded:
            self.publisher.discarded_rows += step.discarded
        if step.rows:  # every row discarded (a batch that had all finished): no step to count
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
        fp = fingerprint_snapshot(hidden, max(hidden.shape[-1] // width, 1))
        self.publisher.publish(AUX, DeferredAux(self.steps, where, fp))

    @staticmethod
    def is_probe(rid: Any) -> bool:
        """Requests marked as probes (``schema.PROBE_MARKER`` in the rid) get their rows published."""
        return is_probe_rid(rid)

    def record_probe(self, rid: str, rows: Any, input_ids: Any, offset: int = 0) -> None:
        """A probe request's prefill aux rows ``[rows, slots * hidden]`` (the draft's ``fc`` input) and
        the prompt ids they belong to, from prompt position ``offset``. Starts copies only."""
        width = self._slot_width or rows.shape[-1]
        self.publisher.publish(PROBE, DeferredProbe(str(rid), rows, input_ids, width, int(offset)))
