"""vLLM plugin entry point (group ``vllm.general_plugins``): ``register()``.

vLLM calls every general plugin with no arguments in each of its processes (the API server, the
engine core, every worker: ``load_general_plugins``). ``register`` does nothing unless
``EAGLE3_TOP_PUBLISH`` or ``EAGLE3_TOP_GUARD_MANIFEST`` is set. Otherwise it patches vLLM's model
runner (``GPUModelRunner``; the CPU build's ``CPUModelRunner`` is one) as soon as a process imports
it, which only the processes that hold a model do:

- ``load_model`` (and ``CPUModelRunner.load_model``): once the target and the drafter are loaded,
  the tracer starts, the hello goes out (``wiring``), the drafter's ``combine_hidden_states`` is
  wrapped (``aux``), and the wiring guard runs (``hooks/guard.py``: it stops start-up on an error
  finding, before the first request).
- ``execute_model``: notes the step's start and its scheduler output.
- ``sample_tokens``: after it, one step event per verify step (``steps``); when vLLM's own
  sampling or drafting raises (a draft whose fc expects more aux slots than the target captures
  dies here, at the first request), the error goes out on a health event first. With async
  scheduling (vLLM's default on GPU) the step waits on the output object until vLLM's own
  ``AsyncGPUModelRunnerOutput.get_output`` has the tokens on the host, and is published from there
  (the drafts are vLLM's placeholders then, -1: it keeps the real ones on the device).

Only the worker with tensor-parallel rank 0 of the last pipeline stage publishes (it holds the
sampled tokens), one source per data-parallel replica, unless ``EAGLE3_TOP_ALL_RANKS=1``. A vLLM
release outside the supported range leaves the plugin inert, with one log line. A speculative
method other than EAGLE-3 is published as such (the hello's algorithm), and nothing is judged as
EAGLE-3. The environment is the SGLang plugin's (``hooks/sglang/plugin.py``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from eagle3_top.hooks import adapter
from eagle3_top.hooks.adapter import (
    ENV_ALL_RANKS,
    ENV_FORCE,
    ENV_PUBLISH,
    OffSwitch,
    after_import,
    new_tracer,
    patch_attr,
    patched,
    publish_hello,
    report_failure,
)
from eagle3_top.tracer.transport import curve_flags

if TYPE_CHECKING:
    from eagle3_top.tracer.schema import Hello
    from eagle3_top.tracer.serving.tracer import Tracer

log = logging.getLogger("eagle3_top.hooks.vllm")

ENV_GUARD_MANIFEST = "EAGLE3_TOP_GUARD_MANIFEST"
RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
CPU_RUNNER_MODULE = "vllm.v1.worker.cpu_model_runner"
STATE_ATTR = "_eagle3_top"  # the runner's own tracing state (``RunnerState``)
HELD_ATTR = "_eagle3_top_step"  # (state, scheduler output, dt) on an async output until vLLM reads it

_off = OffSwitch(log)
_registered = {"done": False}


class RunnerState:
    """What the plugin keeps on one model runner."""

    def __init__(self, tracer: Tracer | None) -> None:
        from .steps import Roots

        self.tracer = tracer
        self.roots = Roots()
        self.scheduler_output: Any = None
        self.t0 = 0.0


def version_problem(v: str | None) -> str | None:
    from eagle3_top.tracer.engines.base import version_problem as problem
    from eagle3_top.tracer.engines.vllm import ENGINE

    return problem(ENGINE, v) if v is not None else "vLLM has no __version__"


def register() -> None:
    """Zero-argument entry point called by vLLM's ``load_general_plugins()``. Never raises."""
    try:
        _register()
    except Exception as exc:  # never break the server
        _off.say(f"plugin registration failed: {type(exc).__name__}: {exc}")


def _register() -> None:
    if not (os.environ.get(ENV_PUBLISH) or os.environ.get(ENV_GUARD_MANIFEST)) or _registered["done"]:
        return
    _registered["done"] = True
    import vllm

    version = getattr(vllm, "__version__", None)
    problem = version_problem(version)
    if problem is not None and os.environ.get(ENV_FORCE) != "1":
        _off.say(f"{problem} (set {ENV_FORCE}=1 to try)")
        if os.environ.get(ENV_GUARD_MANIFEST):
            after_import(RUNNER_MODULE, lambda m: _refuse_start(m, problem))
        return
    after_import(RUNNER_MODULE, _patch_runner)
    after_import(CPU_RUNNER_MODULE, _patch_cpu_runner)


def _wrap(owner: Any, attr: str, around: Any) -> None:
    if not patched(getattr(owner, attr)):  # a process that imports the runner twice patches once
        patch_attr(owner, attr, around)


def _patch_runner(module: Any) -> None:
    try:
        cls = module.GPUModelRunner
        missing = [
            a for a in ("load_model", "execute_model", "sample_tokens") if not callable(getattr(cls, a, None))
        ]
        if missing:
            _off.say(f"vLLM's GPUModelRunner has no {', '.join(missing)}")
            return
        _wrap(cls, "load_model", _around_load_model)
        _wrap(cls, "execute_model", _around_execute_model)
        _wrap(cls, "sample_tokens", _around_sample_tokens)
        pending = getattr(module, "AsyncGPUModelRunnerOutput", None)
        if pending is not None and callable(getattr(pending, "get_output", None)):
            _wrap(pending, "get_output", _around_get_output)
    except Exception as exc:
        _off.say(f"cannot patch vLLM's model runner: {type(exc).__name__}: {exc}")


def _patch_cpu_runner(module: Any) -> None:
    cls = getattr(module, "CPUModelRunner", None)
    if cls is not None and "load_model" in vars(cls):  # its own load_model does not call the base one
        _wrap(cls, "load_model", _around_load_model)


def _refuse_start(module: Any, why: str) -> None:
    """The guard was asked for but this release cannot be judged: in stop mode no model loads."""
    from eagle3_top.hooks import guard as wiring_guard

    refuse = wiring_guard.refuser(why, log)
    if refuse is None:
        return
    _wrap(module.GPUModelRunner, "load_model", refuse)
    cpu = getattr(module, "CPUModelRunner", None)
    if cpu is not None:
        _wrap(cpu, "load_model", refuse)


def _guard_or_none() -> Any:
    from eagle3_top.hooks import guard as wiring_guard

    try:
        return wiring_guard.from_env()
    except wiring_guard.GuardSettingError as exc:
        raise wiring_guard.WiringRefused(f"eagle3-top guard: {exc}") from None


# -- the runner ---------------------------------------------------------------------------------------


def ranks(runner: Any) -> dict[str, int]:
    """This worker's place: TP and PP rank and size, and its data-parallel replica."""
    out = {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "dp_rank": 0}
    try:
        from vllm.distributed import parallel_state as ps

        out["tp_rank"] = int(ps.get_tensor_model_parallel_rank())
        out["tp_size"] = int(ps.get_tensor_model_parallel_world_size())
        pp = ps.get_pp_group()
        out["pp_rank"], out["pp_size"] = int(pp.rank_in_group), int(pp.world_size)
    except Exception as exc:
        log.info("eagle3-top: cannot read the parallel state (%s); taken as %s", exc, out)
    par = getattr(runner, "parallel_config", None)
    dp = getattr(par, "data_parallel_rank", 0)
    out["dp_rank"] = dp if isinstance(dp, int) else 0
    return out


def _around_load_model(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(self, *args, **kwargs)
    if getattr(self, STATE_ATTR, None) is not None:
        return result
    state = RunnerState(None)
    try:
        state.tracer = _start(self)
    except Exception as exc:
        _off.say(f"startup failed: {type(exc).__name__}: {exc}")
    try:
        setattr(self, STATE_ATTR, state)
    except Exception:
        return result
    if os.environ.get(ENV_GUARD_MANIFEST):
        _run_guard(self, state)  # raises to stop the server
    return result


def _run_guard(runner: Any, state: RunnerState) -> None:
    from eagle3_top.hooks import guard as wiring_guard

    def say(level: str, line: str) -> None:
        getattr(log, level if level in ("error", "warning") else "info")(line)

    g = _guard_or_none()
    if g is None:
        return
    hello = state.tracer.publisher.hello if state.tracer is not None else None
    if hello is None:
        r = ranks(runner)
        try:
            from .wiring import wiring_from_runner

            hello = wiring_from_runner(runner, tp_rank=r["tp_rank"], tp_size=r["tp_size"])
        except Exception as exc:
            hello = minimal_hello(r, f"{type(exc).__name__}: {exc}")
    wiring_guard.enforce(g, hello, say)


def _start(runner: Any) -> Tracer | None:
    endpoint = os.environ.get(ENV_PUBLISH)
    if not endpoint or _off.reason is not None:
        return None
    from eagle3_top.tracer.transport.curve import KeyError_

    try:
        curve = curve_flags.server_from_env()
    except KeyError_ as exc:
        _off.say(f"not publishing: {exc}")
        return None
    r = ranks(runner)
    # the last pipeline stage samples: its TP rank 0 holds every request's committed tokens
    publisher_rank = r["tp_rank"] == 0 and r["pp_rank"] == r["pp_size"] - 1
    global_rank = r["dp_rank"] * r["tp_size"] * r["pp_size"] + r["pp_rank"] * r["tp_size"] + r["tp_rank"]
    if not publisher_rank and os.environ.get(ENV_ALL_RANKS) != "1":
        return None
    tracer: Tracer = new_tracer(endpoint, global_rank, "vllm", curve, log)
    from .wiring import wiring_from_runner

    read = lambda: wiring_from_runner(runner, tp_rank=r["tp_rank"], tp_size=r["tp_size"])  # noqa: E731
    hello = publish_hello(tracer, read, lambda error: minimal_hello(r, error), r, log)
    drafter = getattr(getattr(runner, "drafter", None), "model", None)
    if drafter is not None and hello.algorithm == "EAGLE3":
        from .aux import install

        install(tracer, drafter, runner)
    return tracer


def minimal_hello(r: dict[str, int], error: str) -> Hello:
    from .wiring import vllm_version

    hello: Hello = adapter.minimal_hello("vllm", vllm_version(), r, error)
    return hello


def _state(runner: Any) -> RunnerState | None:
    state: RunnerState | None = getattr(runner, STATE_ATTR, None)
    return state if state is not None and state.tracer is not None else None


def _around_execute_model(original: Any, self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
    state = _state(self)
    if state is not None:
        state.scheduler_output, state.t0 = scheduler_output, time.perf_counter()
    try:
        return original(self, scheduler_output, *args, **kwargs)
    except BaseException as exc:
        if state is not None:
            report_failure(state.tracer, "the target's forward (execute_model)", exc)
        raise


def _around_sample_tokens(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    state = _state(self)
    if state is None:
        return original(self, *args, **kwargs)
    try:
        output = original(self, *args, **kwargs)
    except BaseException as exc:
        report_failure(state.tracer, "sampling and drafting (sample_tokens)", exc)
        raise
    tracer = state.tracer
    sched, state.scheduler_output = state.scheduler_output, None
    if tracer is not None and sched is not None and tracer.recording:
        dt = time.perf_counter() - state.t0
        if isinstance(getattr(output, "sampled_token_ids", None), list):
            from .steps import record_step

            tracer.hook(record_step)(tracer, state.roots, sched, output, dt)
        elif hasattr(output, "get_output"):
            # async scheduling: the tokens are still on their way to the host; vLLM itself waits for
            # them in get_output (on its output thread), and the step is published from there
            try:
                setattr(output, HELD_ATTR, (state, sched, dt))
            except Exception:
                pass
    return output


def _around_get_output(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(self, *args, **kwargs)
    held = getattr(self, HELD_ATTR, None)
    if held is not None:
        state, sched, dt = held
        setattr(self, HELD_ATTR, None)
        tracer = state.tracer
        if (
            tracer is not None
            and tracer.enabled
            and isinstance(getattr(result, "sampled_token_ids", None), list)
        ):
            from .steps import record_step

            tracer.hook(record_step)(tracer, state.roots, sched, result, dt)
    return result
