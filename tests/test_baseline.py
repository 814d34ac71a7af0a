"""The baseline speculation is compared with, taken from a recording of the same server run without
speculation (`eagle3-top --baseline-from FILE`), and the built-in engine that makes such a run
(`eagle3-top toy --speculative-algorithm NONE`). Real recordings, the real command, the real engine."""

from __future__ import annotations

import importlib.util
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from eagle3_top.tracer.analysis.baseline import BaselineError, baseline_from_recording
from eagle3_top.tracer.reader.recording import RecordingWriter
from eagle3_top.tracer.schema import (
    HELLO,
    NO_SPECULATION,
    STEP,
    Hello,
    ModelInfo,
    SpecConfig,
    encode,
    step_body,
)
from patience import HANG_GUARD_S
from stream_samples import T0_NS, write_session

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def plain_hello(tp_rank: int = 0, tp_size: int = 1) -> Hello:
    off = SpecConfig(NO_SPECULATION)
    return Hello(
        engine="test", engine_version="1", model=ModelInfo(target_path="/t", num_layers=8, hidden_size=64),
        tp_rank=tp_rank, tp_size=tp_size, requested=off, effective=off,
    )  # fmt: skip


def plain_step(i: int, batch: int, width: int = 1) -> dict[str, object]:
    """A decode step without speculation (width 1: the input token, one committed token per request);
    with ``width`` > 1, a speculative step that accepted nothing."""
    rng = np.random.default_rng(i)
    return step_body(
        step=i, rids=[f"req{r}" for r in range(batch)],
        draft=rng.integers(1, 30_000, (batch, width)).astype(np.int32),
        accept_lens=np.ones(batch, np.int32), tokens=rng.integers(1, 30_000, batch).astype(np.int32),
    )  # fmt: skip


def write_run(
    path: Path,
    runs: list[tuple[str, Hello]],
    steps: int = 200,
    steps_per_s: int = 100,
    batch: int = 8,
    width: int = 1,
    received_together: int = 1,
    stamp: float | None = None,
) -> Path:
    """Each source of ``runs`` decoding ``steps`` steps of ``batch`` requests at exactly
    ``steps_per_s`` (the server's stamps to the nanosecond), a hello before its first step: a real
    recording, as ``eagle3-top record`` writes it. ``received_together``: a receiver that fell behind,
    taking that many steps at a time under the receive time of the last; ``stamp``: every frame
    carries this stamp instead of its own."""
    w = RecordingWriter(str(path), flush_interval_s=0.0)
    period = 10**9 // steps_per_s
    seq = {src: 0 for src, _ in runs}

    def add(src: str, kind: str, t_ns: int, body: dict[str, object]) -> None:
        received = (
            t_ns if kind != STEP else T0_NS + (seq[src] // received_together + 1) * received_together * period
        )
        ts = t_ns / 1e9 if stamp is None else stamp
        w.add(
            encode(kind, src, seq[src], ts, body),
            "tcp://box:5557",
            received if received_together > 1 else t_ns,
        )
        seq[src] += 1

    for src, h in runs:
        add(src, HELLO, T0_NS - period // 2, h.to_body())
    for i in range(steps):
        for src, _ in runs:
            add(src, STEP, T0_NS + i * period, plain_step(i, batch, width))
        if i % 50 == 49:
            w.tick()
    w.close()
    return path


# -- measuring ------------------------------------------------------------------------------------


def test_the_rate_of_a_recording_without_speculation_is_its_committed_tokens_per_second(tmp_path):
    base = write_run(
        tmp_path / "base.mcap", [("box:7:r0", plain_hello())], steps=301, steps_per_s=100, batch=8
    )
    b = baseline_from_recording(str(base))
    assert b.tok_s == pytest.approx(800.0)  # 100 steps/s of 8 requests, one token each
    assert (b.steps, b.span_s, b.mean_batch, b.sources) == (301, 3.0, 8.0, ("box:7:r0",))
    assert b.describe("base.mcap") == (
        "baseline 800.0 tok/s from base.mcap (301 steps over 3.0 s, mean batch 8.0, source box:7:r0)"
    )


def test_the_rate_is_the_servers_own_even_when_the_receiver_fell_behind(tmp_path):
    """A loaded recorder takes 25 steps in one batch under one receive time: the rate still comes
    from the times the server stamped, as 800 tok/s; a stamp past any clock (finite, or the frame
    would not decode) falls back to the receive times."""
    late = write_run(tmp_path / "late.mcap", [("box:7:r0", plain_hello())], steps=301, received_together=25)
    b = baseline_from_recording(str(late))
    assert b.tok_s == pytest.approx(800.0, rel=1e-3) and b.steps == 301
    far = write_run(tmp_path / "far.mcap", [("box:7:r0", plain_hello())], steps=301, stamp=1e300)
    assert baseline_from_recording(str(far)).tok_s == pytest.approx(800.0, rel=1e-3)


def test_ranks_of_one_server_are_summed_and_its_tensor_parallel_repeats_left_out(tmp_path):
    dp = write_run(tmp_path / "dp.mcap", [("box:7:r0", plain_hello()), ("box:9:r1", plain_hello())])
    b = baseline_from_recording(str(dp))
    assert b.tok_s == pytest.approx(1600.0) and b.sources == ("box:7:r0", "box:9:r1")
    # tensor-parallel rank 1 verifies rank 0's batch again: counting it would double the rate
    tp = write_run(tmp_path / "tp.mcap", [("box:7:r0", plain_hello(0, 2)), ("box:9:r1", plain_hello(1, 2))])
    b = baseline_from_recording(str(tp))
    assert b.tok_s == pytest.approx(800.0) and b.sources == ("box:7:r0",) and b.left_out == ("box:9:r1",)
    assert "left out tensor-parallel ranks box:9:r1" in b.describe("tp.mcap")


# -- the monitor with --baseline-from ---------------------------------------------------------------


def test_once_json_shows_the_speedup_against_the_recorded_baseline_and_the_finding_when_slower(tmp_path):
    spec = tmp_path / "spec.mcap"
    write_session(str(spec))  # verify steps of width 4, 10 a second, 4 requests, a draft that got worse
    slow = write_run(
        tmp_path / "slow.mcap", [("box:7:r0", plain_hello())], steps=201, steps_per_s=20, batch=1
    )
    fast = write_run(tmp_path / "fast.mcap", [("box:7:r0", plain_hello())], steps_per_s=100, batch=8)

    r = run("--once", "--json", "--replay", str(spec), "--baseline-from", str(slow))
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == (
        f"eagle3-top: baseline 20.0 tok/s from {slow} (201 steps over 10.0 s, mean batch 1.0, source box:7:r0)"
    )
    (src,) = json.loads(r.stdout)["sources"]
    p = src["payoff"]
    assert p["baseline_tok_s"] == pytest.approx(20.0) and p["speedup"] == pytest.approx(p["tok_s"] / 20.0)
    assert p["speedup"] > 1 and "SPECULATION_SLOWER_THAN_BASELINE" not in {f["code"] for f in src["findings"]}

    r = run("--once", "--json", "--replay", str(spec), "--baseline-from", str(fast))
    assert r.returncode == 0, r.stderr
    (src,) = json.loads(r.stdout)["sources"]
    p = src["payoff"]
    assert p["baseline_tok_s"] == pytest.approx(800.0) and p["speedup"] < 1
    assert p["break_even_accept_length"] == pytest.approx(p["accept_length"] / p["speedup"])
    (slower,) = [f for f in src["findings"] if f["code"] == "SPECULATION_SLOWER_THAN_BASELINE"]
    assert "against 800.0 without speculation" in slower["message"]

    text = run("--once", "--replay", str(spec), "--baseline-from", str(fast))
    assert "vs 800.0 without speculation" in text.stdout and "SPECULATION_SLOWER_THAN_BASELINE" in text.stdout


def _refused(*args: str) -> str:
    r = run("--once", *args)
    assert r.returncode == 2 and not r.stdout, (r.returncode, r.stdout)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    return r.stderr.strip()


def test_a_file_that_gives_no_baseline_is_refused_in_one_line(tmp_path):
    spec = tmp_path / "spec.mcap"
    write_session(str(spec))
    text = tmp_path / "notes.txt"
    text.write_text("tok/s 900\n")
    short = write_run(tmp_path / "short.mcap", [("box:7:r0", plain_hello())], steps=30)
    hosts = write_run(tmp_path / "hosts.mcap", [("a:7:r0", plain_hello()), ("b:7:r0", plain_hello())])
    replay = ("--replay", str(spec))

    assert "not an MCAP file" in _refused(*replay, "--baseline-from", str(text))
    assert "No such file" in _refused(*replay, "--baseline-from", str(tmp_path / "missing.mcap"))
    assert _refused(*replay, "--baseline-from", str(spec)) == (
        f"eagle3-top: {spec}: its steps verify 3 draft tokens: not a run without speculation; "
        "record the server with speculation off"
    )
    assert "30 steps without speculation, too few to measure a rate (at least 50)" in _refused(
        *replay, "--baseline-from", str(short)
    )
    assert "from a:7:r0, b:7:r0, which are not ranks of one server" in _refused(
        *replay, "--baseline-from", str(hosts)
    )
    assert "not both" in _refused(*replay, "--baseline-from", str(short), "--baseline-tok-s", "900")


def test_a_recording_without_width_1_steps_is_refused_by_the_module_too(tmp_path):
    wide = write_run(tmp_path / "wide.mcap", [("box:7:r0", plain_hello())], width=6)
    with pytest.raises(BaselineError, match="its steps verify 5 draft tokens"):
        baseline_from_recording(str(wide))


# -- the built-in engine without speculation ------------------------------------------------------

torch_needed = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="the built-in engine needs torch"
)


@torch_needed
def test_the_engine_without_speculation_decodes_alone_and_publishes_width_1_steps():
    from eagle3_top.hooks.toy.engine import ToyEagle3Engine
    from eagle3_top.hooks.toy.spec_args import SpecArgs
    from eagle3_top.hooks.toy.train import greedy_generate
    from eagle3_top.hooks.toy.workload import make_prompts
    from eagle3_top.hooks.toy_tracing import attach_toy
    from eagle3_top.tracer.schema import step_view
    from eagle3_top.tracer.schema.envelope import Event
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    n, new = 6, 21

    def engine(spec: SpecArgs) -> ToyEagle3Engine:
        return ToyEagle3Engine(spec=spec, batch_size=4, max_new_tokens=new, num_prompts=n, seed=0)

    def outputs(e: ToyEagle3Engine) -> list[list[int]]:
        return [r.output_ids for r in sorted(e.finished, key=lambda r: int(r.rid.split("-")[1]))]

    plain = engine(SpecArgs(NO_SPECULATION, 3, 1, None))
    assert plain.draft is None  # nothing of a draft is loaded, so nothing of one can run
    pub = MemoryPublisher()
    attach_toy(plain, Tracer(pub))
    plain.run()
    speculative = engine(SpecArgs("EAGLE3", 3, 1, None))
    speculative.run()
    # greedy speculative decoding is lossless: both equal the target's own greedy continuation
    reference = greedy_generate(plain.target, make_prompts(n, 48, 0), new)[:, 48:].tolist()
    assert outputs(plain) == outputs(speculative) == reference
    assert len(outputs(plain)) == n and speculative.mean_accept_length() > 2

    (hello,) = [Hello.from_body(b) for b in pub.bodies(HELLO)]
    assert hello.algorithm == NO_SPECULATION and not hello.speculates and hello.aux is None
    assert hello.model.draft_path is None and hello.requested == SpecConfig(NO_SPECULATION)
    steps = [step_view(Event(STEP, "box:7:r0", i, 0.0, b)) for i, b in enumerate(pub.bodies(STEP))]
    assert (
        len(steps) == plain.stats["verify_steps"] == 2 * (new - 1)
    )  # two batches, the prefill's token first
    assert all(s.n == 1 and not s.accepted.any() and len(s.tokens) == s.batch for s in steps)
    # each step commits the target's greedy token; its root is the token committed before it
    per_req: dict[str, list[int]] = {}
    for s in steps:
        for rid, root, tok in zip(s.rids, s.draft[:, 0], s.tokens, strict=True):
            seen = per_req.setdefault(rid, [])
            assert not seen or root == seen[-1]
            seen.append(int(tok))
    by_rid = {r.rid: r.output_ids for r in plain.finished}
    assert all(toks == by_rid[rid][1:] for rid, toks in per_req.items())


def _free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


@torch_needed
def test_a_recorded_run_of_the_engine_without_speculation_is_a_baseline_and_raises_no_findings(tmp_path):
    endpoint = _free_endpoint()
    base = tmp_path / "base.mcap"
    # recording first, then a run of the engine from start to end, then the recording stopped: the
    # file holds the whole run however slowly the box starts either (a fixed --duration did not)
    rec = subprocess.Popen(
        [*CLI, "record", endpoint, "-o", str(base), "--duration", "3600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert rec.stderr is not None and "recording" in rec.stderr.readline()
        engine = subprocess.run(
            [*CLI, "toy", "--publish", endpoint, "--speculative-algorithm", "NONE", "--max-steps", "300",
             "--max-steps-per-s", "100"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S,
        )  # fmt: skip
    finally:
        rec.send_signal(signal.SIGINT)
        _, rec_err = rec.communicate(timeout=HANG_GUARD_S)
    assert rec.returncode == 0, rec_err
    assert "decode steps without speculation" in engine.stderr

    # judged as the monitor judges it, against the toy's training manifest: a server that does not
    # speculate has no layers, acceptance or draft to find fault with
    r = run("--json", "--replay", str(base), "--manifest", str(EXAMPLES / "demo-manifest.json"))
    assert r.returncode == 0, r.stderr
    (src,) = json.loads(r.stdout)["sources"]
    acc = src["acceptance"]
    assert acc["accept_length"] == 1.0 and acc["accept_rate"] is None and acc["request_steps"] > 500
    assert src["findings"] == [] and src["last_step"]["n"] == 1
    assert src["hello"]["spec"]["effective"]["algorithm"] == "NONE" and src["hello"]["aux"] is None

    text = run("--once", "--replay", str(base), "--baseline-tok-s", "10")
    assert "no spec" in text.stdout and "no speculation (the target alone" in text.stdout
    assert "without speculation (x" not in text.stdout  # no speed-up of a baseline over itself

    b = baseline_from_recording(str(base))
    # the rate is what the recording holds (one token per row per step, over its span), and never
    # past the engine's pace cap; how far under the cap depends on the box's load, so no floor
    assert b.mean_batch == pytest.approx(8.0, abs=0.5) and b.steps >= 100
    assert b.tok_s == pytest.approx(b.steps * b.mean_batch / b.span_s, rel=0.05)
    assert b.tok_s < 8 * 110
