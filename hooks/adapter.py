"""What every serving engine's plugin does the same way: the endpoint of each rank, patching a
method around, and the one log line a plugin writes when it stays off. Engine-neutral: nothing here
imports an engine."""

from __future__ import annotations

import functools
import logging
import pkgutil
import re
from collections.abc import Callable
from typing import Any

# The plugins' shared environment (each engine's plugin documents the ones it reads).
ENV_PUBLISH = "EAGLE3_TOP_PUBLISH"  # endpoint to bind, e.g. tcp://127.0.0.1:5557
ENV_ALL_RANKS = "EAGLE3_TOP_ALL_RANKS"  # =1: every TP rank publishes (endpoint port + global rank)
ENV_ALLOW_REMOTE = "EAGLE3_TOP_ALLOW_REMOTE"  # =1: allow a non-loopback bind address
ENV_AUX_INTERVAL = "EAGLE3_TOP_AUX_INTERVAL"  # seconds between aux fingerprints
ENV_FORCE = "EAGLE3_TOP_FORCE"  # =1: try on a release outside the tested range
ENV_PAUSE_FILE = "EAGLE3_TOP_PAUSE_FILE"  # while this file exists the tracer records nothing
# =0: the sender runs as a thread of the serving process; =1: in a sidecar process fed through a
# shared-memory ring (the SGLang plugin's default; see tracer/serving/ring_publisher.py)
ENV_SIDECAR = "EAGLE3_TOP_SIDECAR"
ENV_RING_MB = "EAGLE3_TOP_RING_MB"  # the sidecar's ring, in MiB (64 by default)


def endpoint_for_rank(endpoint: str, rank: int) -> str:
    """``tcp://host:5557`` + rank 2 -> ``tcp://host:5559``; ipc endpoints get a ``.rN`` suffix."""
    if rank == 0:
        return endpoint
    m = re.match(r"^(tcp://.*):(\d+)$", endpoint)
    if m:
        return f"{m.group(1)}:{int(m.group(2)) + rank}"
    return f"{endpoint}.r{rank}"


def has_target(target: str) -> bool:
    """Whether ``module.Class.method`` resolves to something callable (without raising)."""
    owner, attr = target.rsplit(".", 1)
    try:
        return callable(getattr(pkgutil.resolve_name(owner), attr, None))
    except Exception:
        return False


def patch(target: str, around: Callable[..., Any]) -> None:
    """Replace ``module.Class.method`` with ``around(original, *args, **kwargs)``."""
    owner_path, attr = target.rsplit(".", 1)
    patch_attr(pkgutil.resolve_name(owner_path), attr, around)


PATCHED = "_eagle3_top"  # set on every wrapper of ours


def patch_attr(owner: Any, attr: str, around: Callable[..., Any]) -> None:
    """Replace ``owner.attr`` with ``around(original, *args, **kwargs)``; the original stays
    reachable as ``__wrapped__``, and the wrapper says it is ours (``PATCHED``)."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return around(original, *args, **kwargs)

    wrapper.__wrapped__ = original
    setattr(wrapper, PATCHED, True)
    setattr(owner, attr, wrapper)


def patched(fn: Any) -> bool:
    return bool(getattr(fn, PATCHED, False))


class OffSwitch:
    """The single log line a plugin writes when it stays off in a process, and the reason kept."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.reason: str | None = None

    def say(self, msg: str) -> None:
        if self.reason is None:
            self.reason = msg
            self.log.warning("eagle3-top: %s; tracer off, the server is unaffected", msg)


def report_failure(tracer: Any, where: str, exc: BaseException) -> None:
    """The engine's own ``where`` raised and the process is about to die: put the error on a health
    event and give the sender a moment to send it, so a monitor or ``check`` learns why the stream
    ends. The first report wins (the precise one is made where the error was raised)."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)) or tracer is None:
        return
    try:
        if tracer.publisher.engine_error is None:
            tracer.publisher.engine_failed(f"{where} raised {type(exc).__name__}: {str(exc)[:200]}")
            flush = getattr(tracer.publisher, "flush", None)
            if flush is not None:
                flush(0.5)
    except Exception:
        pass


def after_import(module_name: str, callback: Callable[[Any], None]) -> None:
    """Run ``callback(module)`` right after ``module_name`` is imported (now, if it already is), so
    that a plugin loaded in every process of a server patches a class only in the processes that
    import it, at no import cost in the others."""
    import importlib.abc
    import importlib.util
    import sys

    if module_name in sys.modules:
        callback(sys.modules[module_name])
        return

    class Loader(importlib.abc.Loader):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def create_module(self, spec: Any) -> Any:
            return self.inner.create_module(spec)

        def exec_module(self, module: Any) -> None:
            self.inner.exec_module(module)
            callback(module)

    class Finder(importlib.abc.MetaPathFinder):
        busy = False

        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname != module_name or self.busy:
                return None
            self.busy = True
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                self.busy = False
            if spec is None or spec.loader is None:
                return None
            sys.meta_path.remove(self)
            spec.loader = Loader(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder())


def with_ranks(hello: Any, r: dict[str, int]) -> Any:
    """The hello with the publishing rank's pipeline stage and data-parallel replica."""
    import dataclasses

    from eagle3_top.tracer.schema.hello import Parallel

    return dataclasses.replace(
        hello, parallel=Parallel(pp_rank=r["pp_rank"], pp_size=r["pp_size"], dp_rank=r["dp_rank"])
    )


def new_tracer(
    endpoint: str, rank: int, engine: str, curve: Any, log: logging.Logger, sidecar: bool = False
) -> Any:
    """A publisher bound for this rank (``endpoint`` + rank) and the tracer on it, from the plugins'
    environment (remote binds, the aux interval, the pause file). ``sidecar``: the engine's default
    for where the sender runs (``EAGLE3_TOP_SIDECAR`` overrides it); a sidecar that cannot start
    leaves the sender in this process, said once in the log."""
    import os

    from eagle3_top.tracer.schema import SourceId
    from eagle3_top.tracer.serving.publisher import EndpointError, Publisher
    from eagle3_top.tracer.serving.tracer import Tracer

    where = endpoint_for_rank(endpoint, rank)
    source = SourceId.local(rank=rank, engine=engine)
    allow_remote = os.environ.get(ENV_ALLOW_REMOTE) == "1"
    publisher: Any = None
    if os.environ.get(ENV_SIDECAR, "1" if sidecar else "0") == "1":
        from eagle3_top.tracer.serving.ring_publisher import RingPublisher, SidecarError

        try:
            ring = int(float(os.environ.get(ENV_RING_MB) or 64) * 2**20)
            publisher = RingPublisher(where, source, allow_remote=allow_remote, curve=curve, ring_bytes=ring)
        except EndpointError:
            raise  # the endpoint itself is wrong: an in-process sender could not bind it either
        except (SidecarError, OSError, ValueError) as exc:
            log.warning("eagle3-top: %s; the sender runs in this process instead", exc)
    if publisher is None:
        publisher = Publisher(where, source, allow_remote=allow_remote, curve=curve)
    log.info(
        "eagle3-top: publishing on %s (rank %d%s)",
        publisher.bound_endpoint,
        rank,
        ", sender in a sidecar process" if type(publisher).__name__ == "RingPublisher" else "",
    )
    return Tracer(
        publisher,
        aux_interval_s=float(os.environ.get(ENV_AUX_INTERVAL, "0.2")),
        pause_file=os.environ.get(ENV_PAUSE_FILE) or None,
    )


def minimal_hello(engine: str, version: str | None, r: dict[str, int], error: str) -> Any:
    """A hello that says what could not be read; steps still flow."""
    from eagle3_top.tracer.schema import Hello

    return Hello(engine=engine, engine_version=version, tp_rank=r["tp_rank"], tp_size=r["tp_size"],
                 wiring_error=error[:300])  # fmt: skip


def publish_hello(tracer: Any, read: Callable[[], Any], fallback: Callable[[str], Any], r: dict[str, int],
                  log: logging.Logger) -> Any:  # fmt: skip
    """Read the wiring (``read()``), or say what could not be read (``fallback(error)``), with the
    rank's place; publish it as the hello and size the aux slots by it. Returns the hello."""
    try:
        hello = read()
    except Exception as exc:  # steps still flow; the hello says what could not be read
        log.warning("eagle3-top: wiring report incomplete: %s: %s", type(exc).__name__, exc)
        hello = fallback(f"{type(exc).__name__}: {exc}")
    hello = with_ranks(hello, r)
    hidden = hello.model.hidden_size
    if hidden is not None and hidden > 0:
        tracer.set_slot_width(hidden)
    tracer.publisher.set_hello(hello)
    return hello
