"""The wrapper around ``EAGLEWorkerV2.verify``: one step event (and a sampled aux event) per verify.

After the original returns, everything for one verify step is on the device together (SGLang's
``speculative/eagle_worker_v2.py``, 0.5.17 to 0.5.23): rids in row order (``batch.reqs[i].rid``),
the proposed tree (``batch.spec_info``, the ``EagleVerifyInput``), ``accept_lens`` (drafts + bonus),
the committed ``next_token_ids`` and the aux states the draft consumes next
(``logits_output.hidden_states``). We only hand tensors to
``Tracer.make_step`` / ``record_aux``, which start non-blocking copies; nothing here synchronises
the device (no ``.item()``, ``.tolist()``, ``.cpu()``, boolean masks).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable
from typing import Any

from eagle3_top.hooks.adapter import report_failure
from eagle3_top.tracer.serving.deferred import EngineCopy
from eagle3_top.tracer.serving.pending import DeferredStep
from eagle3_top.tracer.serving.tracer import Tracer

# Attributes the wrapper reads; checked once against the live objects (plugin.check_internals).
VERIFY_INPUT_ATTRS = (
    "draft_token",
    "topk",
    "draft_token_num",
    "retrieve_next_token",
    "retrieve_next_sibling",
)
RESULT_ATTRS = ("accept_lens", "next_token_ids", "logits_output")
# Whether the last held step found SGLang's own host copies of accept_lens and next_token_ids
# (with their copy_done event) when its result was processed: then the next draft copy is queued
# without an event of ours, and copy_done stands for it (it follows ours in stream order).
ENGINE_COPIES = {"seen": False}
STEP_ATTR = "_eagle3_top_step"  # (tracer, DeferredStep) held on the verify result until it is processed
_FINISHED_REASON = operator.attrgetter("finished_reason")
_RETRACTED = operator.attrgetter("is_retracted")


_stream_capturing: Callable[[], bool] | None = None


def _capturing() -> bool:
    global _stream_capturing
    if _stream_capturing is None:
        try:
            import torch

            _stream_capturing = (
                torch.cuda.is_current_stream_capturing if torch.cuda.is_available() else (lambda: False)
            )
        except Exception:
            _stream_capturing = lambda: False  # noqa: E731
    try:
        return bool(_stream_capturing())
    except Exception:
        return False


def _is_idle(batch: Any) -> bool:
    fm = getattr(batch, "forward_mode", None)
    try:
        return bool(fm is not None and fm.is_idle())
    except Exception:
        return False


def record_verify(tracer: Tracer, batch: Any, result: Any, dt: float = 0.0, hold: bool = False) -> bool:
    """Hand one verify step to the tracer. Returns False when the step was skipped.

    ``hold``: keep the step on ``result`` for ``release_step`` instead of publishing it now. Then only
    the draft is copied here: SGLang copies ``accept_lens`` and ``next_token_ids`` to the host itself
    before it processes the result (``GenerationBatchResult.copy_to_cpu``), and ``release_step``
    reads those. Call inside ``tracer.guarded`` (``make_around_verify`` does).
    """
    if result is None or _capturing():
        return False
    si = getattr(batch, "spec_info", None)
    reqs = getattr(batch, "reqs", None)
    if si is None or not reqs or _is_idle(batch):
        return False
    draft = getattr(si, "draft_token", None)
    accept_lens = getattr(result, "accept_lens", None)
    next_tokens = getattr(result, "next_token_ids", None)
    if draft is None or accept_lens is None or next_tokens is None:
        return False
    bs = len(reqs)
    n = int(getattr(si, "draft_token_num", 0) or 0)
    # shapes are host-side metadata: reading them does not touch the device
    if n <= 0 or draft.numel() != bs * n or accept_lens.numel() != bs or next_tokens.numel() != bs * n:
        return False  # a layout we do not know (padded batch, adaptive width): skip, do not guess
    topk = int(getattr(si, "topk", 1) or 1)
    retrieve = (si.retrieve_next_token, si.retrieve_next_sibling) if topk > 1 else None
    # the requests themselves, in row order: their rids are read on the sender thread; one read
    # here, so that a request type we do not know is a hook error (counted, and the tracer switches
    # itself off after a few) rather than a failure on the sender for every step
    reqs[0].rid  # noqa: B018
    step = tracer.make_step(
        list(reqs),
        draft,
        accept_lens,
        next_tokens,
        topk=topk,
        retrieve=retrieve,
        dt=dt,
        late=hold,
        seal_later=hold and ENGINE_COPIES["seen"],
    )
    if step is not None:
        if hold:
            try:
                setattr(result, STEP_ATTR, (tracer, step))
            except (AttributeError, TypeError):  # a result type with __slots__: publish now
                hold = False
        if not hold:
            tracer.publish_step(step)
    if tracer.want_aux():
        lo = getattr(result, "logits_output", None)
        hidden = getattr(lo, "hidden_states", None) if lo is not None else None
        if hidden is not None and getattr(hidden, "dim", lambda: 0)() == 2 and hidden.shape[0] > 0:
            tracer.record_aux(hidden, where="verify_aux")
    return True


def make_around_verify(
    get_tracer: Callable[[Any], Tracer | None], hold: Callable[[], bool] = lambda: False
) -> Callable[..., Any]:
    """An AROUND hook ``fn(original, self, batch, *args, **kwargs)`` for HookRegistry.

    ``get_tracer(worker)`` returns the tracer for this worker, or None when this process/rank does
    not publish (it must be cheap after the first call). ``hold()``: whether the result-processing
    hook is live, so steps wait for it.
    """

    def around_verify(original: Callable[..., Any], self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            result = original(self, batch, *args, **kwargs)
        except BaseException as exc:
            report_engine_failure(get_tracer, self, exc)
            raise
        try:
            tracer = get_tracer(self)
        except Exception:
            tracer = None
        if tracer is not None and tracer.recording:
            tracer.hook(record_verify)(tracer, batch, result, time.perf_counter() - t0, hold())
        return result

    return around_verify


def report_engine_failure(
    get_tracer: Callable[[Any], Tracer | None], worker: Any, exc: BaseException, where: str = "verify"
) -> None:
    """SGLang's own ``where`` raised: the scheduler is about to die. Put the error on a health event
    and give the sender a moment to send it, so a monitor or ``check`` learns why the stream ends."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return
    try:
        tracer = get_tracer(worker)
    except Exception:
        return
    # verify runs inside the worker's step: the step's hook sees the same exception again, and the
    # report made where it was raised (sent already) is the more precise one
    report_failure(tracer, where, exc)


def make_around_forward(get_tracer: Callable[[Any], Tracer | None]) -> Callable[..., Any]:
    """AROUND hook for the spec worker's ``forward_batch_generation``: the whole step, prefill
    included. It records nothing; it only says why the stream ends when SGLang's own forward raises
    (0.5.17-0.5.21 crash at the first prefill when a Llama target captures the embedding)."""

    def around(original: Callable[..., Any], self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, batch, *args, **kwargs)
        except BaseException as exc:
            mode = getattr(getattr(batch, "forward_mode", None), "name", None)
            report_engine_failure(get_tracer, self, exc, f"the {mode.lower() if mode else 'forward'} step")
            raise

    return around


def _host_copy(t: Any, numel: int) -> bool:
    """``t`` is a host tensor of ``numel`` elements (SGLang's copy of a verify result)."""
    return getattr(t, "is_cuda", True) is False and t.numel() == numel


def release_step(
    tracer: Tracer, scheduler: Any, batch: Any, step: DeferredStep, result: Any = None, publish: bool = True
) -> None:
    """Publish a held step, without the rows SGLang is about to skip.

    Runs before SGLang processes the result, so ``req.finished()`` still says whether the request
    had finished before this verify's tokens: exactly SGLang's own skip test
    (``process_batch_result_decode``). The accept lengths and tokens are SGLang's own host copies of
    them (``result.copy_done`` says when they are there) when it made them; otherwise they are
    copied now. Host-side flags and attribute reads only. ``publish=False``: judge the rows now,
    publish later (``publish_held``, once SGLang has waited for ``copy_done`` itself).
    """
    if step.late and result is not None:
        done = getattr(result, "copy_done", None)
        acc = getattr(result, "accept_lens", None)
        nxt = getattr(result, "next_token_ids", None)
        bs, n = step.shape
        seen = done is not None and _host_copy(acc, bs) and _host_copy(nxt, bs * n)
        if seen:
            step.supply(EngineCopy(acc, done), EngineCopy(nxt, done), ready=done)
        ENGINE_COPIES["seen"] = seen
    reqs = getattr(batch, "reqs", None)
    overlap = bool(
        getattr(scheduler, "enable_overlap", False) or getattr(scheduler, "enable_overlap_mlx", False)
    )
    if overlap and reqs is not None and step.same_rows(reqs):
        # Req.finished() is `finished_reason is not None` (0.5.17 to 0.5.23). This runs for every
        # row of every step, so the common case (nothing gone) is read with C-level maps
        try:
            reasons = list(map(_FINISHED_REASON, reqs))
        except AttributeError:  # a request type without the attribute: SGLang's own test, slower
            step.discard([bool(r.finished() or r.is_retracted) for r in reqs])
        else:
            if reasons.count(None) != len(reasons) or any(map(_RETRACTED, reqs)):
                step.discard([f is not None or r.is_retracted for f, r in zip(reasons, reqs, strict=True)])
    if publish:
        tracer.publish_step(step)


def publish_held(tracer: Tracer, step: DeferredStep) -> None:
    """Publish a step ``release_step`` judged, after SGLang processed its result: SGLang has waited
    for its own ``copy_done`` by then, so the step's host copies are there and a sidecar's ring takes
    them at once, from the serving thread, with no thread of ours woken."""
    tracer.publish_step(step)


def make_around_process_result(on_call: Callable[[], None] = lambda: None) -> Callable[..., Any]:
    """An AROUND hook for ``Scheduler.process_batch_result(self, batch, result)``: publishes the step
    the verify wrapper held on ``result``. ``on_call()`` runs on every call (the plugin marks the
    hook live with it)."""

    def around_process_result(
        original: Callable[..., Any], self: Any, batch: Any, result: Any, *a: Any, **kw: Any
    ) -> Any:
        held = None
        try:
            on_call()
            held = getattr(result, STEP_ATTR, None)
            if held is not None:
                setattr(result, STEP_ATTR, None)
                tracer, step = held
                if tracer.enabled:
                    tracer.hook(release_step)(tracer, self, batch, step, result, False)
                else:
                    held = None
        except Exception:  # never in the server's way; release_step's own errors are counted
            held = None
        out = original(self, batch, result, *a, **kw)
        if held is not None:
            try:
                tracer.hook(publish_held)(tracer, step)
            except Exception:
                pass
        return out

    return around_process_result
