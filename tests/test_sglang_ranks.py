"""Who publishes where, in real multi-process gloo worlds: TP rank 0 only by default, every rank on
port + rank with ``EAGLE3_TOP_ALL_RANKS=1``, and each data-parallel replica on its own port."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import time
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402
from patience import PATIENCE_S  # noqa: E402
from sglang_objects import LAYER_CASES, build, eagle_worker, linger, server_args, write_models  # noqa: E402

# -- child side (runs with the stand-ins installed) --------------------------------------------------


def child_rank() -> dict[str, Any]:
    """One tensor-parallel rank of a real two-process gloo world (E3T_TEST_RANK): SGLang's own rank
    functions say which rank this process is, and our plugin decides whether, and where, it
    publishes. Stays up until the parent has read what it sent (``linger``)."""

    from eagle3_top.hooks.sglang import plugin

    rank = int(os.environ["E3T_TEST_RANK"])
    sglang_cpu.init_process_group(2, rank)
    root = tempfile.mkdtemp(prefix=f"e3t-sgl-r{rank}-")
    tdir, ddir = write_models(root, "tp2", LAYER_CASES["nested"])
    spec = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    sa = server_args(tdir, ddir, tp_size=2, **spec)
    _aux_cfg, target, draft_runner, runner = build(sa, ddir, rank)
    tracer = plugin.tracer_for_worker(eagle_worker(sa, runner, draft_runner))
    out = {
        "ranks": plugin.ranks(),
        "publishing": tracer is not None,
        "bound": None if tracer is None else tracer.publisher.bound_endpoint,
        "socket_bound": plugin._state["publisher"] is not None,
        "off": plugin._state["off"].reason,
        "layers_to_capture": list(target.model.layers_to_capture),
    }
    linger(tracer)
    return out


def child_dp_replica() -> dict[str, Any]:
    """One data-parallel replica (E3T_TEST_DP_RANK) of a --dp-size 2 server, TP 1: a world of its own.
    The replica's rank reaches the scheduler the way this SGLang passes it (0.5.23: the published
    parallel context; 0.5.17: an argument of ``Scheduler.__init__``), and our scheduler-init hook
    runs around an ``__init__`` with SGLang's real signature."""
    import inspect

    from eagle3_top.hooks.sglang import plugin
    from sglang.srt.managers.scheduler import Scheduler

    dp = int(os.environ["E3T_TEST_DP_RANK"])
    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix=f"e3t-sgl-dp{dp}-")
    tdir, ddir = write_models(root, "dp", LAYER_CASES["nested"])
    spec = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    sa = server_args(tdir, ddir, dp_size=2, **spec)
    _aux_cfg, _target, draft_runner, runner = build(sa, ddir)
    sglang_cpu.publish_server_args(sa, dp_rank=dp)  # where 0.5.23 keeps the replica's rank
    worker = eagle_worker(sa, runner, draft_runner)
    sig = inspect.signature(Scheduler.__init__)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:  # the real one needs a GPU model runner
        self.draft_worker = worker

    init.__signature__ = sig  # type: ignore[attr-defined]
    kwargs = {name: None for name in list(sig.parameters)[1:]}
    if "dp_rank" in kwargs:
        kwargs["dp_rank"] = dp  # as 0.5.17's run_scheduler_process passes it
    plugin._around_scheduler_init(init, object.__new__(Scheduler), **kwargs)
    tracer = plugin.tracer_for_worker(worker)
    out = {
        "ranks": plugin.ranks(),
        "bound": None if tracer is None else tracer.publisher.bound_endpoint,
        "off": plugin._state["off"].reason,
    }
    linger(tracer)
    return out


# -- pytest side ---------------------------------------------------------------------------------------


def _free_port_pair() -> int:
    """A port p with p + 1 free too (rank r publishes on port + r), below the kernel's ephemeral
    range: there, the gloo world's own connections and our subscriber's reconnect attempts (a
    loopback connect to a port nobody listens on yet can connect to itself) can take p or p + 1
    before the rank binds it, and the rank then publishes nowhere."""
    import random

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(max(1024, low - 12000), low - 2)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise AssertionError("no two consecutive free ports")


def _run_two_ranks(all_ranks: bool, child: str = "child_rank") -> dict[str, Any]:
    """Two scheduler-like processes (``child``: TP ranks 0 and 1 of one world, or
    ``child_dp_replica``: DP replicas 0 and 1, a world each) and a subscriber on ports p and p + 1."""
    from eagle3_top.hooks.adapter import endpoint_for_rank
    from eagle3_top.tracer.reader.subscriber import Subscriber

    endpoint = f"tcp://127.0.0.1:{_free_port_pair()}"
    env = {"EAGLE3_TOP_PUBLISH": endpoint, "MASTER_PORT": str(sglang_cpu.free_port())}
    if all_ranks:
        env["EAGLE3_TOP_ALL_RANKS"] = "1"
    # the sources that must be heard: both ranks, or rank 0 alone (rank 1 reports itself quiet)
    expected = {"r0", "r1"} if all_ranks or child == "child_dp_replica" else {"r0"}
    sub = Subscriber([endpoint, endpoint_for_rank(endpoint, 1)])
    own = (
        [{"E3T_TEST_RANK": str(r)} for r in (0, 1)]
        if child == "child_rank"
        else [{"E3T_TEST_DP_RANK": str(r), "MASTER_PORT": str(sglang_cpu.free_port())} for r in (0, 1)]
    )
    meet = tempfile.mkdtemp(prefix="e3t-ranks-")
    ready = [os.path.join(meet, f"ready{i}") for i in range(len(own))]
    release = os.path.join(meet, "release")
    procs = [
        sglang_cpu.start_child(
            "test_sglang_ranks", child, env={**env, **o, "E3T_TEST_READY": r, "E3T_TEST_RELEASE": release}
        )
        for o, r in zip(own, ready, strict=True)
    ]
    events: list[Any] = []

    def heard() -> set[str]:
        return {e.src.rsplit(":", 1)[1] for e in events if e.kind == "hello"}

    try:
        # until every expected source is heard; a source that never speaks gets PATIENCE_S once all
        # children are up, and the test then says which one is missing
        all_ready_at = None
        while any(p.running() for p in procs) and not expected <= heard():
            events += sub.poll(100)
            if all_ready_at is None and all(os.path.exists(r) for r in ready):
                all_ready_at = time.monotonic()
            if all_ready_at is not None and time.monotonic() - all_ready_at > PATIENCE_S:
                break
        with open(release, "w"):
            pass
        children = [sglang_cpu.child_result(p.finish()) for p in procs]
        events += sub.poll(0)
    finally:
        for p in procs:
            if p.running():
                p.proc.kill()
        sub.close()
        shutil.rmtree(meet, ignore_errors=True)
    hellos = {e.src: e.body for e in events if e.kind == "hello"}
    return {"endpoint": endpoint, "children": children, "hellos": hellos}


@pytest.fixture(scope="module")
def two_ranks() -> dict[str, Any]:
    return _run_two_ranks(all_ranks=False)


@pytest.fixture(scope="module")
def two_ranks_all() -> dict[str, Any]:
    return _run_two_ranks(all_ranks=True)


@pytest.fixture(scope="module")
def two_replicas() -> dict[str, Any]:
    return _run_two_ranks(all_ranks=False, child="child_dp_replica")


def test_only_tp_rank_0_publishes_by_default(two_ranks: dict[str, Any]) -> None:
    r0, r1 = two_ranks["children"]
    # the ranks as SGLang's own parallel state reports them in each process
    assert r0["ranks"] == {"tp_rank": 0, "tp_size": 2, "pp_rank": 0, "pp_size": 1, "dp_rank": 0}
    assert r1["ranks"] == {"tp_rank": 1, "tp_size": 2, "pp_rank": 0, "pp_size": 1, "dp_rank": 0}
    assert r0["publishing"] and r0["bound"] == two_ranks["endpoint"]
    assert not r1["publishing"] and not r1["socket_bound"] and r1["off"] is None  # quiet, not broken
    (src,) = two_ranks["hellos"]
    assert src.endswith(":r0") and two_ranks["hellos"][src]["tp"] == {"rank": 0, "size": 2}


def test_all_ranks_publish_each_as_its_own_source(two_ranks_all: dict[str, Any]) -> None:
    from eagle3_top.hooks.adapter import endpoint_for_rank

    r0, r1 = two_ranks_all["children"]
    ep = two_ranks_all["endpoint"]
    assert r0["bound"] == ep and r1["bound"] == endpoint_for_rank(ep, 1), (r0["off"], r1["off"])
    hellos = two_ranks_all["hellos"]
    assert sorted(src.rsplit(":", 1)[1] for src in hellos) == ["r0", "r1"]
    for src, hello in hellos.items():
        rank = int(src.rsplit(":r", 1)[1])
        assert hello["tp"] == {"rank": rank, "size": 2}
        # each rank reads its own live target: the same capture layers on both
        assert hello["aux"]["capture_native"] == [r0, r1][rank]["layers_to_capture"] == [1, 3, 4]


def test_each_data_parallel_replica_publishes_on_its_own_port(two_replicas: dict[str, Any]) -> None:
    """--dp-size 2: two TP-1 worlds, each its rank 0; before, both bound the same endpoint and one
    of them, whichever came second, switched itself off."""
    from eagle3_top.hooks.adapter import endpoint_for_rank

    d0, d1 = two_replicas["children"]
    assert (d0["ranks"]["dp_rank"], d1["ranks"]["dp_rank"]) == (0, 1)
    assert d0["off"] is None and d1["off"] is None
    ep = two_replicas["endpoint"]
    assert (d0["bound"], d1["bound"]) == (ep, endpoint_for_rank(ep, 1))
    assert sorted(src.rsplit(":", 1)[1] for src in two_replicas["hellos"]) == ["r0", "r1"]
