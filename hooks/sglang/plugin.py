"""SGLang plugin entry point (group ``sglang.srt.plugins``): ``register()``.

SGLang's ``load_plugins()`` calls every general plugin with no arguments, in each process that
loads plugins (scheduler processes — one per TP/PP rank — the engine/HTTP process, detokenizer, DP
controller). ``register`` does nothing unless ``EAGLE3_TOP_PUBLISH`` is set. Otherwise it registers
AROUND hooks through SGLang's ``HookRegistry`` (applied by ``load_plugins`` right after):

- ``Scheduler.__init__``: once the scheduler exists, its spec worker is live; we build the tracer,
  bind the publisher and publish the hello (wiring report) from the live objects.
- ``EAGLEWorkerV2.verify``: one step event per verify (``verify.py``).
- ``EAGLEWorkerV2.forward_batch_generation``: records nothing; when SGLang's own step raises (the
  target's prefill included), the error goes out on a health event before the scheduler dies.
- ``Scheduler.process_batch_result``: publishes the step held on the verify result, without the rows
  SGLang skips (a request that finished one step earlier, under the overlap scheduler).
- ``EagleDraftWorker._draft_extend_for_prefill`` (when the class has it): the prefill aux rows of
  probe requests (rid carrying ``e3t-probe``), one ``probe`` event per request (``probe.py``).

Only the scheduler process ever binds a socket: the publisher is created lazily, from those hooks.
Only TP rank 0 publishes unless ``EAGLE3_TOP_ALL_RANKS=1`` (each rank binds port + rank).
Anything that does not match the internals we know logs one line and leaves the server alone.

Environment:
- ``EAGLE3_TOP_PUBLISH``: endpoint to bind, e.g. ``tcp://127.0.0.1:5557``.
- ``EAGLE3_TOP_ALL_RANKS=1``: every TP rank publishes (endpoint port + global rank).
- ``EAGLE3_TOP_ALLOW_REMOTE=1``: allow a non-loopback bind address.
- ``EAGLE3_TOP_AUX_INTERVAL``: seconds between aux fingerprints (default 0.2).
- ``EAGLE3_TOP_FORCE=1``: try on an SGLang version outside the tested range.
- ``EAGLE3_TOP_SIDECAR=0``: the sender as a thread of the scheduler process instead of a sidecar
  process fed through shared memory (the default here); ``EAGLE3_TOP_RING_MB``: that ring's size.
- ``EAGLE3_TOP_PAUSE_FILE``: while this file exists nothing is recorded (checked twice a second).
- ``EAGLE3_TOP_CURVE_SECRET`` / ``EAGLE3_TOP_CURVE_CLIENTS``: CURVE certificate and admitted clients;
  ``EAGLE3_TOP_CURVE_ANY_CLIENT=1`` instead of the clients: encrypt, admit anyone with the server key.
  A half configuration publishes nothing (one log line).
- ``EAGLE3_TOP_GUARD_MANIFEST`` (with or without ``EAGLE3_TOP_PUBLISH``): the wiring guard
  (``hooks/guard.py``): once ``Scheduler.__init__`` has built the spec worker, its wiring is judged
  against this training manifest; an error finding stops the server before its first request
  (``EAGLE3_TOP_GUARD=warn``: log and serve).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from eagle3_top.hooks import adapter
from eagle3_top.hooks.adapter import (
    ENV_ALL_RANKS,
    ENV_FORCE,
    ENV_PUBLISH,
    OffSwitch,
    has_target,
    new_tracer,
    patch,
    publish_hello,
)
from eagle3_top.tracer.transport import curve_flags

if TYPE_CHECKING:
    from eagle3_top.tracer.schema import Hello
    from eagle3_top.tracer.transport.curve import CurveServer

log = logging.getLogger("eagle3_top.hooks.sglang")

ENV_CURVE_SECRET = curve_flags.ENV_SECRET  # .key_secret certificate: publish CURVE-encrypted
ENV_CURVE_CLIENTS = curve_flags.ENV_CLIENTS  # directory of admitted client certificates
ENV_CURVE_ANY_CLIENT = curve_flags.ENV_ANY_CLIENT  # =1: encrypt, but admit any client
ENV_GUARD_MANIFEST = "EAGLE3_TOP_GUARD_MANIFEST"  # the wiring guard's training manifest (hooks/guard.py)

VERIFY_TARGET = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.verify"
# the whole step (prefill included): only to say why the stream ends when SGLang's forward raises
FORWARD_TARGET = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation"
SCHEDULER_INIT_TARGET = "sglang.srt.managers.scheduler.Scheduler.__init__"
RESULT_TARGET = "sglang.srt.managers.scheduler.Scheduler.process_batch_result"
PREFILL_EXTEND_TARGET = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_prefill"


def _fresh_state() -> dict[str, Any]:
    return {
        "registered": False,
        "off": OffSwitch(log),  # its reason once we decided to stay off in this process
        "tracers": {},  # id(worker) -> Tracer | None
        "publisher": None,
        "tracer": None,
        "result_hook_live": False,  # Scheduler.process_batch_result ran through our hook: verify holds steps
        "init_dp_rank": None,  # the dp_rank Scheduler.__init__ was given (0.5.17 passes it there)
    }


_state: dict[str, Any] = _fresh_state()
_lock = threading.Lock()


def _one_line(msg: str) -> None:
    _state["off"].say(msg)


def version_problem(v: str | None) -> str | None:
    """None for a release eagle3-top knows (the engine package's supported range); else why not."""
    from eagle3_top.tracer.engines.base import version_problem as problem
    from eagle3_top.tracer.engines.sglang import ENGINE

    return problem(ENGINE, v) if v is not None else "SGLang has no __version__"


def _in_function(*names: str) -> bool:
    f: Any = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name in names:
            return True
        f = f.f_back
    return False


def check_internals() -> str | None:
    """None when the classes/attributes we wrap exist; otherwise what is missing."""
    import pkgutil

    for target in (VERIFY_TARGET, SCHEDULER_INIT_TARGET):
        owner, attr = target.rsplit(".", 1)
        try:
            obj = pkgutil.resolve_name(owner)
        except Exception as exc:
            return f"cannot import {owner} ({type(exc).__name__}: {exc})"
        if not callable(getattr(obj, attr, None)):
            return f"{owner} has no {attr}"
    return None


def register() -> None:
    """Zero-argument entry point called by SGLang's ``load_plugins()``. Never raises."""
    try:
        _register()
    except Exception as exc:  # never break the server
        _one_line(f"plugin registration failed: {type(exc).__name__}: {exc}")


def _register() -> None:
    if not (os.environ.get(ENV_PUBLISH) or os.environ.get(ENV_GUARD_MANIFEST)) or _state["registered"]:
        return
    if _in_function("run_detokenizer_process"):
        return  # no spec worker in the detokenizer: don't import the scheduler there
    import sglang

    version = getattr(sglang, "__version__", None)
    problem = version_problem(version)
    if problem is not None and os.environ.get(ENV_FORCE) != "1":
        _one_line(f"{problem} (set {ENV_FORCE}=1 to try)")
        _guard_cannot_run(problem)
        return
    missing = check_internals()
    if missing is not None:
        _one_line(f"SGLang {version} internals differ: {missing}")
        _guard_cannot_run(f"SGLang {version} internals differ: {missing}")
        return
    from .verify import make_around_forward, make_around_process_result, make_around_verify

    around_verify = make_around_verify(tracer_for_worker, hold=lambda: _state["result_hook_live"])
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:
        HookRegistry = None
    hooks = [(VERIFY_TARGET, around_verify), (SCHEDULER_INIT_TARGET, _around_scheduler_init)]
    if has_target(FORWARD_TARGET):
        hooks.append((FORWARD_TARGET, make_around_forward(tracer_for_worker)))
    if has_target(RESULT_TARGET):
        hooks.append((RESULT_TARGET, make_around_process_result(_result_hook_live)))
    else:
        log.info("eagle3-top: no %s in this SGLang: overlap tail rows are published", RESULT_TARGET)
    if has_target(PREFILL_EXTEND_TARGET):
        from .probe import make_around_prefill_extend

        hooks.append((PREFILL_EXTEND_TARGET, make_around_prefill_extend(lambda _w: _state["tracer"])))
    else:
        log.info("eagle3-top: no %s in this SGLang: probe rows are not captured", PREFILL_EXTEND_TARGET)
    for target, around in hooks:
        if HookRegistry is not None:
            HookRegistry.register(target, around, HookType.AROUND)
        else:  # no registry: patch the class attributes ourselves
            patch(target, around)
    _state["registered"] = True


def _guard_cannot_run(why: str) -> None:
    """A guard that was asked for but cannot judge this server: in stop mode the server must not
    start as if it had passed. Registers a ``Scheduler.__init__`` hook that refuses, where it can."""
    from eagle3_top.hooks import guard as wiring_guard

    refuse = wiring_guard.refuser(why, log)
    if refuse is None:
        return
    try:
        patch(SCHEDULER_INIT_TARGET, refuse)
    except Exception as exc:  # no scheduler to refuse in: said in the log above
        log.error("eagle3-top guard: cannot stop the server either: %s: %s", type(exc).__name__, exc)


def _result_hook_live() -> None:
    _state["result_hook_live"] = True


# -- scheduler side -----------------------------------------------------------------------------------


def _around_scheduler_init(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(self, *args, **kwargs)
    try:
        _state["init_dp_rank"] = _init_arg(original, self, args, kwargs, "dp_rank")
    except Exception:
        pass
    worker = getattr(self, "draft_worker", None)
    live = worker is not None and hasattr(worker, "target_worker") and hasattr(worker, "verify")
    try:
        if live:
            tracer_for_worker(worker)
    except Exception as exc:
        _one_line(f"startup wiring failed: {type(exc).__name__}: {exc}")
    if os.environ.get(ENV_GUARD_MANIFEST):
        _run_guard(worker if live else None)  # raises to stop the server
    return result


def _run_guard(worker: Any) -> None:
    """The wiring guard on this scheduler's spec worker (``hooks/guard.py``): every finding goes to
    SGLang's log; in stop mode an error finding raises out of ``Scheduler.__init__``, which SGLang
    reports and stops on, before the first request."""
    from eagle3_top.hooks import guard as wiring_guard

    def say(level: str, line: str) -> None:
        getattr(log, level if level in ("error", "warning") else "info")(line)

    try:
        g = wiring_guard.from_env()
    except wiring_guard.GuardSettingError as exc:
        raise wiring_guard.WiringRefused(f"eagle3-top guard: {exc}") from None
    if g is None:
        return
    tracer = _state.get("tracer")
    hello = tracer.publisher.hello if (worker is not None and tracer is not None) else None
    if hello is None:  # not publishing on this rank: read the wiring as the publisher would
        r = ranks()
        if worker is None:
            hello = minimal_hello(r, "no EAGLE spec worker on this scheduler (is speculative decoding on?)")
        else:
            try:
                from .wiring import wiring_from_worker

                hello = wiring_from_worker(worker, tp_rank=r["tp_rank"], tp_size=r["tp_size"])
            except Exception as exc:
                hello = minimal_hello(r, f"{type(exc).__name__}: {exc}")
    wiring_guard.enforce(g, hello, say)


def _init_arg(original: Any, self: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """The value ``Scheduler.__init__`` was called with for parameter ``name`` (None if it has none)."""
    import inspect

    bound = inspect.signature(original).bind_partial(self, *args, **kwargs)
    return bound.arguments.get(name)


def _dp_rank(par: Any) -> int:
    """This scheduler's data-parallel replica (0 without a DP controller): 0.5.23 publishes it in the
    parallel context; 0.5.17 passes it to ``Scheduler.__init__``; a router sets ``SGLANG_DP_RANK``."""
    for get in (
        lambda: getattr(par, "dp_rank", None),
        lambda: _state.get("init_dp_rank"),
        lambda: os.environ.get("SGLANG_DP_RANK"),
    ):
        try:
            v = get()
        except Exception:
            continue
        if v is not None:
            return int(v)
    return 0


def ranks() -> dict[str, int]:
    """TP/PP placement and data-parallel replica of this scheduler process, from SGLang's live
    parallel state.

    ``runtime_context.get_parallel()`` (0.5.17 - 0.5.23) reads the live groups; 0.5.21 and later
    no longer export the old ``get_tensor_model_parallel_rank`` getters from
    ``sglang.srt.distributed``, and reading them there failed quietly, so every rank took itself
    for rank 0. What cannot be
    read stays 0 (rank) / 1 (size), and is said once in the log.
    """
    import functools
    from collections.abc import Callable

    out = {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "dp_rank": 0}
    par: Any = None
    read: dict[str, Callable[[], Any]]
    try:
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        read = {k: functools.partial(getattr, par, k) for k in ("tp_rank", "tp_size", "pp_rank", "pp_size")}
    except ImportError:  # no runtime context: the parallel-state getters themselves
        from sglang.srt.distributed import parallel_state as ps

        read = {
            "tp_rank": ps.get_tensor_model_parallel_rank,
            "tp_size": ps.get_tensor_model_parallel_world_size,
            "pp_rank": ps.get_pipeline_model_parallel_rank,
            "pp_size": ps.get_pipeline_model_parallel_world_size,
        }
    read["dp_rank"] = functools.partial(_dp_rank, par)
    unread = []
    for key, get in read.items():
        try:
            out[key] = int(get())
        except Exception as exc:
            unread.append(f"{key} ({type(exc).__name__}: {exc})"[:160])
    if unread:
        log.info("eagle3-top: cannot read %s; taken as %s", ", ".join(unread), out)
    return out


def tracer_for_worker(worker: Any) -> Any:
    """The tracer for this spec worker, created on first use (hello published); None = not us."""
    key = id(worker)
    tracers = _state["tracers"]
    if key in tracers:
        return tracers[key]
    with _lock:
        if key in tracers:
            return tracers[key]
        tracers[key] = None
        if _state["off"].reason is not None:
            return None
        try:
            tracers[key] = _start(worker)
        except Exception as exc:
            _one_line(f"startup failed: {type(exc).__name__}: {exc}")
            tracers[key] = None
        return tracers[key]


def curve_from_env() -> CurveServer | None:
    """The publisher's CURVE settings from the environment (None: plain); raises ``KeyError_``."""
    return curve_flags.server_from_env()


def _start(worker: Any) -> Any:
    endpoint = os.environ.get(ENV_PUBLISH)
    if not endpoint:
        return None
    from eagle3_top.tracer.transport.curve import KeyError_

    try:  # ahead of the rank check, so that every rank says why the stream stays off
        curve = curve_from_env()
    except KeyError_ as exc:
        _one_line(f"not publishing: {exc}")
        return None
    r = ranks()
    all_ranks = os.environ.get(ENV_ALL_RANKS) == "1"
    # Each data-parallel replica (--dp-size, one TP x PP world each) is a server of its own: by
    # default its rank 0 publishes. Ports are numbered across replicas, as SGLang numbers its own
    # per-replica KV-event publishers (base + rank): replica d, rank k -> port + d * (tp * pp) + k.
    replica_rank = r["tp_rank"] + r["pp_rank"] * r["tp_size"]
    global_rank = r["dp_rank"] * r["tp_size"] * r["pp_size"] + replica_rank
    if not all_ranks and replica_rank != 0:
        return None
    if _state["tracer"] is not None:  # a second spec worker in one process: share the source
        tracer = _state["tracer"]
    else:
        tracer = new_tracer(endpoint, global_rank, "sglang", curve, log, sidecar=True)
        _state["publisher"], _state["tracer"] = tracer.publisher, tracer
    from .wiring import wiring_from_worker

    read = lambda: wiring_from_worker(worker, tp_rank=r["tp_rank"], tp_size=r["tp_size"])  # noqa: E731
    publish_hello(tracer, read, lambda error: minimal_hello(r, error), r, log)
    return tracer


def minimal_hello(r: dict[str, int], error: str) -> Hello:
    """A hello that says what could not be read; steps still flow."""
    try:
        import sglang

        version = getattr(sglang, "__version__", None)
    except Exception:
        version = None
    hello: Hello = adapter.minimal_hello("sglang", version, r, error)
    return hello


def _reset_for_tests() -> None:
    """Close the publisher and forget every worker (tests only)."""
    pub = _state.get("publisher")
    if pub is not None:
        pub.close()
    _state.update(_fresh_state())
