"""The step, aux and probe events from SGLang's real verify-path objects, through our hooks as
SGLang's ``HookRegistry`` applies them: chain and tree steps, idle and broken batches, the overlap
scheduler's tail rows, and probe rows of SGLang's real ``Req`` objects, read back by a subscriber."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402
from patience import PATIENCE_S
from sglang_objects import HIDDEN, LAYER_CASES, build, eagle_worker, server_args, verify_objects, write_models  # noqa: E402

# -- child side (runs with the stand-ins installed) --------------------------------------------------


def child_verify() -> dict[str, Any]:
    """Real EAGLEWorkerV2 class, hooked through SGLang's HookRegistry by our register()."""
    import tempfile
    import time

    from eagle3_top.hooks.sglang import plugin
    from eagle3_top.hooks.sglang.verify import STEP_ATTR
    from eagle3_top.tracer.reader.subscriber import Subscriber
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix="e3t-sgl-")
    tdir, ddir = write_models(root, "verify", LAYER_CASES["nested"])
    sa = server_args(
        tdir, ddir, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
    )
    aux_cfg, target, draft_runner, runner = build(sa, ddir)

    results: dict[int, Any] = {}

    def fake_verify(self: Any, batch: Any, pp_proxy_tensors: Any = None, grammar_barrier: Any = None) -> Any:
        return results[id(batch)]  # run_eagle_verify needs a GPU; the hook wraps whatever is there

    processed: list[tuple[int, int]] = []

    def fake_process(self: Any, batch: Any, result: Any) -> None:
        processed.append((id(batch), id(result)))  # the real one needs a whole live scheduler

    EAGLEWorkerV2.verify = fake_verify
    Scheduler.process_batch_result = fake_process
    plugin.register()
    HookRegistry.apply_hooks()
    wrapped = getattr(EAGLEWorkerV2.verify, "__wrapped__", None) is fake_verify
    wrapped = wrapped and getattr(Scheduler.process_batch_result, "__wrapped__", None) is fake_process

    worker = eagle_worker(sa, runner, draft_runner)

    endpoint = os.environ["EAGLE3_TOP_PUBLISH"]
    sub = Subscriber([endpoint])
    tracer = plugin.tracer_for_worker(worker)  # binds, publishes the hello
    assert tracer is not None, plugin._state["off"].reason
    # wait until the subscription is live (a health event arrives), then re-send the hello
    deadline = time.monotonic() + PATIENCE_S
    seen: list[Any] = []
    while time.monotonic() < deadline and not any(e.kind == "health" for e in seen):
        seen += sub.poll(200)
    tracer.publisher.set_hello(tracer.publisher.hello)

    expects = []
    b1, r1, e1 = verify_objects(3, 4, 1, [1, 4, 2], seed=1)
    b2, r2, e2 = verify_objects(2, 4, 2, [3, 2], seed=2)
    for b, r in ((b1, r1), (b2, r2)):
        results[id(b)] = r
    returned = [worker.verify(b1) is r1, worker.verify(b2) is r2]
    expects += [e1, e2]

    # idle batch, batch without spec_info: no event, no error
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    idle = ScheduleBatch(reqs=[], forward_mode=ForwardMode.IDLE, spec_info=None, device="cpu")
    results[id(idle)] = r1
    returned.append(worker.verify(idle) is r1)
    nospec = ScheduleBatch(reqs=b1.reqs, forward_mode=ForwardMode.TARGET_VERIFY, spec_info=None, device="cpu")
    results[id(nospec)] = r1
    returned.append(worker.verify(nospec) is r1)
    # a request object that breaks our read (no rid): the server still gets its result; we count it
    broken = ScheduleBatch(
        reqs=[object()] * 3, forward_mode=ForwardMode.TARGET_VERIFY, spec_info=b1.spec_info, device="cpu"
    )
    results[id(broken)] = r1
    returned.append(worker.verify(broken) is r1)

    # The overlap scheduler's tail row. Once process_batch_result has run through our hook, verify
    # holds its step on the result; the hook publishes it, leaving out the rows SGLang skips: under
    # overlap, requests already finished (or retracted) when the result is processed.
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    overlap, sync = object.__new__(Scheduler), object.__new__(Scheduler)
    overlap.enable_overlap, sync.enable_overlap = True, False
    Scheduler.process_batch_result(overlap, idle, r1)  # a prefill-like call: no step held on it
    tail: dict[str, Any] = {"held": [], "processed_ok": []}
    for sched, gone, seed in (
        (overlap, {1: "finished"}, 3),
        (sync, {1: "finished"}, 4),
        (overlap, {0: "retracted", 2: "finished"}, 5),
    ):
        b, r, e = verify_objects(3, 4, 1, [2, 4, 3], seed=seed, real_reqs=True)
        results[id(b)] = r
        returned.append(worker.verify(b) is r)
        tail["held"].append(getattr(r, STEP_ATTR, None) is not None)
        for i, how in gone.items():
            if how == "finished":
                b.reqs[i].finished_reason = FINISH_LENGTH(length=8)
            else:
                b.reqs[i].is_retracted = True
        Scheduler.process_batch_result(sched, b, r)
        tail["processed_ok"].append(processed[-1] == (id(b), id(r)) and getattr(r, STEP_ATTR, None) is None)
        keep = [i for i in range(3) if sched is sync or i not in gone]
        expects.append(
            {
                "rids": [e["rids"][i] for i in keep],
                "draft": [e["draft"][i] for i in keep],
                "accepted": [e["accepted"][i] for i in keep],
                "tokens": [t for i in keep for t in e["draft_tokens_by_row"][i]],
                "topk": 1,
                "parents": None,
                "discarded": 3 - len(keep),
            }
        )

    events: list[Any] = []
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        events += sub.poll(200)
        kinds = [e.kind for e in events]
        if (
            kinds.count("step") >= 5
            and "aux" in kinds
            and any(e.kind == "health" and e.body.get("hook_errors") for e in events)
        ):
            break
    sub.close()
    tracer.publisher.close()

    def dec(b: Any) -> Any:
        return None if b is None else np.frombuffer(b, "<i4").tolist()

    steps = []
    for e in events:
        if e.kind == "step":
            b = e.body
            steps.append(
                {
                    "rids": b["rids"],
                    "n": b["n"],
                    "batch": b["batch"],
                    "topk": b["topk"],
                    "draft": np.frombuffer(b["draft"], "<i4").reshape(b["batch"], b["n"]).tolist(),
                    "accepted": dec(b["accepted"]),
                    "tokens": dec(b["tokens"]),
                    "parents": dec(b["parents"]),
                    "discarded": b.get("discarded", 0),
                }
            )
    hellos = [e.body for e in events + seen if e.kind == "hello"]
    auxes = [e.body for e in events if e.kind == "aux"]
    healths = [e.body for e in events if e.kind == "health"]
    return {
        "probe": _prefill_probe_on_real_reqs(),
        "wrapped": wrapped,
        "returned": returned,
        "tail": tail,
        "expects": expects,
        "steps": steps,
        "hello": hellos[-1] if hellos else None,
        "aux": auxes,
        "health": healths[-1] if healths else None,
        "src": sorted({e.src for e in events}),
    }


def _prefill_probe_on_real_reqs() -> list[dict[str, Any]]:
    """A prefill batch of SGLang's real ``Req`` objects through our probe capture: one ordinary
    request, one probe with a 4-token cached prefix. The prompt ids must come from the requests
    themselves, not from the batch's device ids (zeros here)."""
    import torch
    from eagle3_top.hooks.sglang.probe import record_prefill_probes
    from eagle3_top.tracer.schema import probe_view
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams

    reqs = [
        Req("req-a", "", [11, 12, 13], SamplingParams(max_new_tokens=4)),
        Req("e3t-probe-0-x", "", [9, 8, 7, 6, 5, 4, 3], SamplingParams(max_new_tokens=4)),
    ]
    batch = ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.EXTEND, device="cpu")
    batch.extend_lens, batch.prefix_lens = [3, 3], [0, 4]
    batch.input_ids = torch.zeros(6, dtype=torch.int64)
    hidden = torch.arange(6 * 3 * HIDDEN, dtype=torch.float32).reshape(6, 3 * HIDDEN)
    pub = MemoryPublisher()
    tracer = Tracer(pub)  # type: ignore[arg-type]
    tracer.set_slot_width(HIDDEN)
    record_prefill_probes(tracer, batch, hidden)
    out = []
    for body in pub.bodies("probe"):
        got = probe_view(body)
        out.append(
            {
                "rid": got.rid,
                "offset": got.offset,
                "rows": got.rows,
                "ids": got.input_ids.tolist(),
                "aux_is_its_rows": bool(np.array_equal(got.aux, hidden[3:6].numpy())),
                "hook_errors": pub.hook_errors,
            }
        )
    return out


# -- pytest side ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verify_run() -> dict[str, Any]:
    return sglang_cpu.run_child(
        "test_sglang_verify",
        "child_verify",
        env={"EAGLE3_TOP_PUBLISH": f"tcp://127.0.0.1:{sglang_cpu.free_port()}"},
    )


def test_verify_wrapper_publishes_real_steps(verify_run: dict[str, Any]) -> None:
    assert verify_run["wrapped"], "HookRegistry did not wrap EAGLEWorkerV2.verify"
    assert all(verify_run["returned"]), "the wrapper must hand back the original result, always"
    steps, expects = verify_run["steps"], verify_run["expects"]
    assert len(steps) == 5, steps  # idle / no-spec / broken batches publish nothing
    for got, exp in zip(steps, expects, strict=True):
        assert got["discarded"] == exp.get("discarded", 0)
        assert got["rids"] == exp["rids"]
        assert got["draft"] == exp["draft"]
        assert got["accepted"] == exp["accepted"]
        assert got["tokens"] == exp["tokens"]
        assert got["topk"] == exp["topk"]
        if exp["parents"] is None:
            assert got["parents"] is None
        else:
            assert np.array(got["parents"]).reshape(len(exp["rids"]), -1).tolist() == exp["parents"]
    assert all(t != 0 for s in steps for t in s["tokens"])


def test_probe_ids_come_from_sglangs_own_requests(verify_run: dict[str, Any]) -> None:
    (probe,) = verify_run["probe"]
    assert probe["rid"] == "e3t-probe-0-x" and probe["offset"] == 4 and probe["rows"] == 3
    assert probe["ids"] == [5, 4, 3]  # the prompt after its 4 cached tokens, read on the host
    assert probe["aux_is_its_rows"]  # rows 3..5 of the packed batch: the second request's
    assert probe["hook_errors"] == 0


def test_overlap_tail_rows_are_left_out_as_sglang_skips_them(verify_run: dict[str, Any]) -> None:
    """Under the overlap scheduler a request that finished one verify earlier is still in the next
    batch; SGLang drops that row when it processes the result, and so must the stream, or every
    request shows one verify step more than ``meta_info.spec_verify_ct``."""
    tail = verify_run["tail"]
    assert tail["held"] == [True, True, True], "steps must wait for the result to be processed"
    assert all(tail["processed_ok"]), "SGLang's own result processing must run, on the same objects"
    overlap_finished, sync_finished, overlap_mixed = verify_run["steps"][2:]
    assert overlap_finished["rids"] == ["req-3-0", "req-3-2"] and overlap_finished["discarded"] == 1
    assert sync_finished["batch"] == 3 and sync_finished["discarded"] == 0  # no overlap: SGLang keeps it
    assert overlap_mixed["rids"] == ["req-5-1"] and overlap_mixed["discarded"] == 2


def test_verify_wrapper_hello_aux_and_health(verify_run: dict[str, Any]) -> None:
    hello = verify_run["hello"]
    assert hello is not None and hello["engine"]["name"] == "sglang"
    assert hello["spec"]["effective"] == {
        "algorithm": "EAGLE3",
        "num_steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
    }
    assert hello["aux"]["capture_canonical"] == [0, 2, 3]
    aux = verify_run["aux"]
    assert aux and aux[0]["slots"] == 3 and aux[0]["slot_width"] == HIDDEN and aux[0]["rows"] == 12
    health = verify_run["health"]
    assert health["hook_errors"] >= 1 and not health["disabled"]  # the broken batch was counted
    assert len(verify_run["src"]) == 1 and verify_run["src"][0].endswith(":r0")


def test_a_verify_that_raises_puts_the_error_on_the_wire_and_still_raises() -> None:
    """SGLang's verify raising (the scheduler is about to die): the tracer's next health event
    carries the engine error, and SGLang sees its own exception unchanged."""
    from eagle3_top.hooks.sglang.verify import make_around_verify
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    tracer = Tracer(MemoryPublisher())
    around = make_around_verify(lambda _w: tracer)

    def verify(_self: object, _batch: object) -> None:
        raise RuntimeError("The size of tensor a (384) must match the size of tensor b (256)")

    with pytest.raises(RuntimeError, match="size of tensor a"):
        around(verify, object(), object())
    err = tracer.publisher.engine_error
    assert err is not None and "verify raised RuntimeError: The size of tensor a (384)" in err


def test_a_verify_that_raises_inside_the_step_is_reported_once_where_it_was_raised() -> None:
    """verify runs inside the worker's step, so the step's hook sees the same exception: the error
    on the wire stays the one named where it was raised."""
    from eagle3_top.hooks.sglang.verify import make_around_forward, make_around_verify
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    tracer = Tracer(MemoryPublisher())
    around_verify = make_around_verify(lambda _w: tracer)
    around_step = make_around_forward(lambda _w: tracer)

    def verify(_self: object, _batch: object) -> None:
        raise RuntimeError("The size of tensor a (384) must match the size of tensor b (256)")

    def step(self: object, batch: object) -> None:
        around_verify(verify, self, batch)

    batch = type("Batch", (), {"forward_mode": type("Mode", (), {"name": "DECODE"})()})()
    with pytest.raises(RuntimeError, match="size of tensor a"):
        around_step(step, object(), batch)
    err = tracer.publisher.engine_error
    assert err is not None and err.startswith("verify raised RuntimeError: The size of tensor a (384)")
