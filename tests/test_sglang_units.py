"""The SGLang adapter's pure parts: no sglang needed (and none imported)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import HANG_GUARD_S, collect, wait_connected
from eagle3_top.hooks.adapter import endpoint_for_rank
from eagle3_top.hooks.sglang.launch import split_own_args
from eagle3_top.hooks.sglang.plugin import version_problem
from eagle3_top.hooks.sglang.spec_flags import spec_report
from eagle3_top.tracer.schema import SpecConfig


def test_adapter_modules_import_without_sglang() -> None:
    code = (
        "import sys, os; os.environ.pop('EAGLE3_TOP_PUBLISH', None)\n"
        "import eagle3_top.hooks.sglang.plugin as p, eagle3_top.hooks.sglang.wiring, "
        "eagle3_top.hooks.sglang.verify, eagle3_top.hooks.sglang.launch\n"
        "p.register()\n"
        "assert 'sglang' not in sys.modules, 'register() without EAGLE3_TOP_PUBLISH must not import sglang'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=HANG_GUARD_S)


@pytest.mark.parametrize(
    "v,ok",
    [
        ("0.5.17", True),
        ("0.5.23", True),
        ("0.5.20.post1", True),
        ("0.5.16", False),
        ("0.5.24", False),
        ("0.6.0", False),
        (None, False),
        ("dev", False),
    ],
)
def test_version_range(v: str | None, ok: bool) -> None:
    assert (version_problem(v) is None) is ok


def test_endpoint_per_rank() -> None:
    assert endpoint_for_rank("tcp://127.0.0.1:5557", 0) == "tcp://127.0.0.1:5557"
    assert endpoint_for_rank("tcp://127.0.0.1:5557", 3) == "tcp://127.0.0.1:5560"
    assert endpoint_for_rank("ipc:///tmp/e3t", 1) == "ipc:///tmp/e3t.r1"


def test_launcher_strips_its_own_flag() -> None:
    argv = ["--model-path", "m", "--eagle3-top-publish", "tcp://127.0.0.1:6000", "--port", "30000"]
    assert split_own_args(argv) == (["--model-path", "m", "--port", "30000"], "tcp://127.0.0.1:6000")
    assert split_own_args(["--eagle3-top-publish=tcp://x:1", "--tp", "2"]) == (["--tp", "2"], "tcp://x:1")
    assert split_own_args(["--tp", "2"]) == (["--tp", "2"], None)


def test_spec_report_without_requested_values_reports_no_rewrites() -> None:
    sa = SimpleNamespace(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        max_running_requests=48,
    )
    rep = spec_report(sa, argv=[])
    assert rep.requested_source == "unknown"
    assert rep.requested == rep.effective == SpecConfig("EAGLE3", 3, 1, 4)
    assert rep.rewrites == ()
    live = spec_report(sa, argv=[], live={"num_draft_tokens": 5})
    assert live.effective.num_draft_tokens == 5


def _plain_verify(seed: int, accept_lens: list[int], rids: list[str]) -> tuple:
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(seed)
    bs, n = len(rids), 4
    si = SimpleNamespace(
        draft_token=torch.randint(1, 500, (bs * n,), generator=g),
        topk=1,
        draft_token_num=n,
        retrieve_next_token=None,
        retrieve_next_sibling=None,
    )
    batch = SimpleNamespace(reqs=[SimpleNamespace(rid=r) for r in rids], spec_info=si, forward_mode=None)
    res = SimpleNamespace(
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
        next_token_ids=torch.randint(1, 500, (bs * n,), generator=g),
        logits_output=SimpleNamespace(hidden_states=torch.randn(bs * n, 6, generator=g)),
    )
    return batch, res


def test_record_verify_on_plain_tensors(recording_pub) -> None:
    from eagle3_top.hooks.sglang.verify import record_verify
    from eagle3_top.tracer.serving.tracer import Tracer

    tracer = Tracer(recording_pub, aux_interval_s=0.0)  # type: ignore[arg-type]
    tracer.set_slot_width(2)
    batch, res = _plain_verify(1, [1, 3], ["a", "b"])
    assert record_verify(tracer, batch, res, 0.1)
    (step,) = recording_pub.bodies("step")
    draft = batch.spec_info.draft_token.view(2, 4).tolist()
    assert step["rids"] == ["a", "b"] and step["topk"] == 1 and step["dt"] == 0.1
    assert np.frombuffer(step["draft"], "<i4").reshape(2, 4).tolist() == draft
    assert np.frombuffer(step["accepted"], "<i4").tolist() == [0, 2]
    nxt = res.next_token_ids.view(2, 4).tolist()
    assert np.frombuffer(step["tokens"], "<i4").tolist() == nxt[0][:1] + nxt[1][:3]
    (aux,) = recording_pub.bodies("aux")
    assert aux["where"] == "verify_aux" and aux["slots"] == 3 and aux["rows"] == 8
    # a width we do not know (padded batch) is skipped, not guessed; so is an idle batch
    batch.spec_info.draft_token_num = 3
    assert not record_verify(tracer, batch, res)
    assert not record_verify(tracer, SimpleNamespace(reqs=[], spec_info=batch.spec_info), res)
    assert len(recording_pub.bodies("step")) == 1 and recording_pub.hook_errors == 0


def test_held_step_is_released_without_the_rows_sglang_skips(recording_pub) -> None:
    """The overlap tail row, on plain objects: the step waits on the result; the result-processing
    hook drops rows of requests that had already finished, and always runs SGLang's own code."""
    from eagle3_top.hooks.sglang.verify import STEP_ATTR, make_around_process_result, make_around_verify
    from eagle3_top.tracer.serving.tracer import Tracer

    tracer = Tracer(recording_pub)  # type: ignore[arg-type]
    around_verify = make_around_verify(lambda _w: tracer, hold=lambda: True)
    around_process = make_around_process_result()
    batch, res = _plain_verify(2, [2, 4, 1], ["a", "b", "c"])
    for i, r in enumerate(batch.reqs):
        r.finished = (lambda done: lambda: done)(i == 1)
        r.is_retracted = False
    assert around_verify(lambda self, b: res, object(), batch) is res
    assert getattr(res, STEP_ATTR) is not None and recording_pub.bodies("step") == []
    ran: list = []
    scheduler = SimpleNamespace(enable_overlap=True)
    around_process(lambda self, b, r: ran.append((self, b, r)), scheduler, batch, res)
    assert ran == [(scheduler, batch, res)] and getattr(res, STEP_ATTR) is None
    (step,) = recording_pub.bodies("step")
    assert step["rids"] == ["a", "c"] and step["batch"] == 2 and step["discarded"] == 1
    assert np.frombuffer(step["accepted"], "<i4").tolist() == [1, 0]
    nxt = res.next_token_ids.view(3, 4).tolist()
    assert np.frombuffer(step["tokens"], "<i4").tolist() == nxt[0][:2] + nxt[2][:1]

    # a result that cannot carry the step (__slots__) gets it published at once
    class Slotted:
        __slots__ = ("accept_lens", "next_token_ids", "logits_output")

    slotted = Slotted()
    slotted.accept_lens, slotted.next_token_ids, slotted.logits_output = (
        res.accept_lens,
        res.next_token_ids,
        None,
    )
    around_verify(lambda self, b: slotted, object(), batch)
    assert len(recording_pub.bodies("step")) == 2 and recording_pub.hook_errors == 0
    # a hook that breaks is counted, and the server's result processing still runs
    broken, res2 = _plain_verify(3, [1, 1, 1], ["a", "b", "c"])
    around_verify(lambda self, b: res2, object(), broken)  # plain reqs: no finished()
    around_process(lambda self, b, r: ran.append(r), scheduler, broken, res2)
    assert ran[-1] is res2 and recording_pub.hook_errors == 1


def test_pause_file_stops_recording_without_a_restart(recording_pub, tmp_path) -> None:
    from eagle3_top.hooks.sglang.verify import make_around_verify
    from eagle3_top.tracer.serving.tracer import Tracer

    pause = tmp_path / "pause"
    tracer = Tracer(recording_pub, pause_file=str(pause))  # type: ignore[arg-type]
    tracer.PAUSE_CHECK_S = 0.0  # look at the file on every step (the default is twice a second)
    around = make_around_verify(lambda _w: tracer)
    batch, res = _plain_verify(4, [2, 1], ["a", "b"])
    assert around(lambda self, b: res, object(), batch) is res
    pause.touch()
    for _ in range(3):
        assert around(lambda self, b: res, object(), batch) is res  # the server's result, untouched
    assert recording_pub.paused
    pause.unlink()
    around(lambda self, b: res, object(), batch)
    assert len(recording_pub.bodies("step")) == 2 and not recording_pub.paused
    assert [s["step"] for s in recording_pub.bodies("step")] == [0, 1]


def test_repeated_hook_failures_switch_the_tracer_off_once(caplog) -> None:
    """A hook that keeps failing: every verify still returns the server's result; errors are
    counted up to the limit, then the tracer switches itself off, says so once in the server log,
    and the health events a monitor reads say ``disabled``."""
    import logging

    from eagle3_top.hooks.sglang.verify import make_around_verify
    from eagle3_top.tracer.reader.subscriber import Subscriber
    from eagle3_top.tracer.schema import SourceId
    from eagle3_top.tracer.serving.publisher import Publisher
    from eagle3_top.tracer.serving.tracer import Tracer

    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(engine="sglang"), health_interval_s=0.1)
    sub = Subscriber([pub.bound_endpoint])
    try:
        wait_connected(sub)
        tracer = Tracer(pub, max_errors=5)
        around = make_around_verify(lambda _w: tracer)
        good, res = _plain_verify(5, [2, 1], ["a", "b"])
        broken = SimpleNamespace(reqs=[object(), object()], spec_info=good.spec_info, forward_mode=None)
        with caplog.at_level(logging.WARNING, logger="eagle3_top"):
            assert around(lambda self, b: res, object(), good) is res
            for _ in range(12):
                assert around(lambda self, b: res, object(), broken) is res
            assert around(lambda self, b: res, object(), good) is res  # off now: not recorded
        assert not tracer.enabled and pub.hook_errors == 5
        said = [r.getMessage() for r in caplog.records if "tracer disabled" in r.getMessage()]
        assert len(said) == 1 and "5 hook errors" in said[0] and "AttributeError" in said[0], said
        events = collect(sub, lambda got: any(e.kind == "health" and e.body["disabled"] for e in got))
        health = [e.body for e in events if e.kind == "health" and e.body["disabled"]]
        assert health and health[-1]["hook_errors"] == 5
        assert [e.kind for e in events].count("step") == 1  # the good step before, none after
    finally:
        sub.close()
        pub.close()
