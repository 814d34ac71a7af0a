"""`eagle3-top check` as a deploy gate: it never passes on evidence it did not see. Real publishers on
loopback, the real command line in a child process (as a pipeline runs it), real exit codes."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from conftest import HANG_GUARD_S, PATIENCE_S, wait_subscribed
from eagle3_top.tracer.schema import (
    HELLO,
    STEP,
    DraftClaims,
    Event,
    SourceId,
    encode,
    step_body,
)
from eagle3_top.tracer.serving.publisher import Publisher
from stream_samples import hello, step

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def publish_steps(pub: Publisher, count: int, accepted: int, batch: int = 8, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for i in range(count):
        acc = rng.integers(max(accepted - 1, 0), accepted + 1, batch).astype(np.int32)
        body = step_body(
            step=i, rids=[f"req{r}" for r in range(batch)],
            draft=rng.integers(1, 30_000, (batch, 4)).astype(np.int32), accept_lens=acc + 1,
            tokens=rng.integers(1, 30_000, int(acc.sum()) + batch).astype(np.int32),
        )  # fmt: skip
        pub.publish(STEP, body)


@pytest.fixture
def pub() -> Iterator[Publisher]:
    p = Publisher("tcp://127.0.0.1:0", SourceId("gate-host", 4242, 0, "test"), hello_interval_s=0.5)
    yield p
    p.close()


def run_check(*args: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "check", *args], capture_output=True, text=True, timeout=timeout)


def start_check(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "check", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def feed_while(proc: subprocess.Popen[str], pub: Publisher, count: int, accepted: int) -> None:
    """Publish steps until the check has surely subscribed (a PUB drops what nobody hears)."""
    for _ in range(300):
        if proc.poll() is not None:
            return
        publish_steps(pub, count, accepted)
        time.sleep(0.1)


def test_an_idle_engine_is_partial_evidence_not_a_pass(pub: Publisher) -> None:
    pub.set_hello(hello())
    r = run_check(pub.bound_endpoint, "--timeout", "3")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "hello yes, 0 verify steps" in r.stdout
    assert "missing: verify steps: 0 seen, 50 asked for (--min-steps)" in r.stdout
    assert "PARTIAL" in r.stdout and "ok" not in r.stdout.split("\n")[-2]
    allowed = run_check(pub.bound_endpoint, "--timeout", "2", "--allow-partial")
    assert allowed.returncode == 0 and "allowed by --allow-partial" in allowed.stdout


def test_enough_steps_pass_and_the_verdict_shows_acceptance(pub: Publisher) -> None:
    pub.set_hello(hello())
    proc = start_check(pub.bound_endpoint, "--steps", "20", "--timeout", "30", "--json")
    feed_while(proc, pub, 10, accepted=2)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    verdict = json.loads(out)
    assert proc.returncode == 0, err
    assert verdict["verdict"] == "ok" and verdict["exit_code"] == 0
    (src,) = verdict["sources"]
    assert src["hello"] and src["steps"] >= 20 and src["complete"]
    assert 2.5 < src["accept_length"] < 3.5  # accepted drafts 1..2, plus the bonus token
    assert len(src["conditional"]) == 3 and src["conditional"][0] == pytest.approx(1.0)


def test_min_steps_says_what_is_enough(pub: Publisher) -> None:
    pub.set_hello(hello())
    proc = start_check(pub.bound_endpoint, "--steps", "100000", "--min-steps", "5", "--timeout", "3")
    feed_while(proc, pub, 2, accepted=2)
    out, _ = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, out
    assert "ok: 1 source(s)" in out


def test_a_publisher_that_goes_away_is_reported_at_once(pub: Publisher) -> None:
    pub.set_hello(hello())
    # an hour's timeout: a check that waited it out would hit communicate's bound instead of returning
    proc = start_check(pub.bound_endpoint, "--timeout", "3600")
    wait_subscribed(pub)  # the hello goes out on the subscription, before the steps
    publish_steps(pub, 3, accepted=1)
    pub.close()  # its last health event says it is closing
    out, _ = proc.communicate(timeout=PATIENCE_S * 5)
    assert proc.returncode == 3
    assert "went away: its publisher closed" in out
    assert "3 verify steps" in out


def test_a_crashed_engine_fails_the_gate_the_moment_it_says_so(pub: Publisher) -> None:
    pub.set_hello(hello())
    proc = start_check(pub.bound_endpoint, "--timeout", "3600")  # returns long before it, or fails
    wait_subscribed(pub)
    pub.engine_failed("RuntimeError: The size of tensor a (192) must match the size of tensor b (128)")
    out, _ = proc.communicate(timeout=PATIENCE_S * 5)
    assert proc.returncode == 1
    assert "ENGINE_FAILED" in out and "size of tensor a (192)" in out


def test_a_stream_of_malformed_steps_never_passes(pub: Publisher) -> None:
    pub.set_hello(hello())
    proc = start_check(pub.bound_endpoint, "--timeout", "4")
    for _ in range(30):
        pub.publish(
            STEP, {"batch": 0, "n": 2**63 - 1, "rids": [], "draft": b"", "accepted": b"", "tokens": b""}
        )
        pub.publish(STEP, {"batch": "x"})
        time.sleep(0.1)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 3, out + err
    assert "malformed" in out and "failed the schema" in out
    assert "Traceback" not in err


def test_frames_naming_no_source_are_named(pub: Publisher) -> None:
    pub.set_hello(hello())
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.bind("tcp://127.0.0.1:0")
    junk_ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        proc = start_check(pub.bound_endpoint, junk_ep, "--steps", "5", "--timeout", "4")
        for _ in range(30):
            publish_steps(pub, 2, accepted=1)
            sock.send(b"\x93\x01\x02")  # msgpack, but not a map
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        sock.close(0)
    assert proc.returncode == 3
    assert "named no source" in out


def test_accept_length_far_below_the_drafts_own_claims_fails(pub: Publisher) -> None:
    pub.set_hello(
        hello(DraftClaims(acc=[0.9, 0.85, 0.8], simulated_acc_len=2.3, source="training_metrics.json"))
    )
    proc = start_check(pub.bound_endpoint, "--steps", "40", "--timeout", "30")
    feed_while(proc, pub, 10, accepted=0)
    out, _ = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 1, out
    assert "ACCEPT_LENGTH_FAR_BELOW_EXPECTED" in out
    assert "expected 3.28 by the draft's own training_metrics.json" in out


def test_check_waits_for_the_request_steps_its_accept_length_check_needs() -> None:
    """With an accept length to expect, the request-steps that comparison needs are part of being
    done: check keeps watching a busy source until they are in, instead of stopping at --steps and
    calling the verdict partial for want of steps still streaming in (as it did on a loaded box)."""
    from eagle3_top.tracer.analysis.check import Enough, Watch, progress_line
    from eagle3_top.tracer.analysis.thresholds import THRESHOLDS
    from eagle3_top.tracer.reader.ledger import FrameLedger

    need = THRESHOLDS.min_request_steps
    claims = DraftClaims(acc=[0.6, 0.5, 0.4], simulated_acc_len=1.5, source="training_metrics.json")
    for h, expects in ((hello(claims), True), (hello(), False)):
        w, src, now = Watch(Enough(steps=5, min_steps=5)), "box:1:r0", 1000.0
        assert not w.fold([Event(HELLO, src, 0, now, h.to_body())], now)
        i = 0
        while not w.fold([Event(STEP, src, i + 1, now, step(i, batch=8))], now):
            i += 1
            assert i < 1000, "never done"
        seen = w.book.sources[src].acceptance.request_steps
        if expects:  # done the very step the request-steps were in, not at the 5 steps asked for
            assert need <= seen < need + 8, seen
            assert f"{need}/{need} request-steps" in progress_line(w.book, w.enough, 1.0, 30)
        else:  # nothing to compare acceptance with: --steps is enough
            assert i + 1 == 5 and seen == 40
        result = w.result(FrameLedger(), 1.0, "")
        assert result.verdict == "ok" and result.reports[0].complete, result.reports[0].missing


def test_progress_goes_to_a_terminal_and_nowhere_else(pub: Publisher) -> None:
    pub.set_hello(hello())
    quiet = run_check(pub.bound_endpoint, "--timeout", "2.5")
    assert quiet.stderr == ""  # not a terminal: nothing but the verdict
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "check", pub.bound_endpoint, "--timeout", "2.5"], stdout=subprocess.PIPE, stderr=slave
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(30)
    os.close(master)
    assert b"check: gate-host:4242:r0 0/50 steps" in seen


def test_hostile_strings_reach_the_verdict_escaped() -> None:
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    src = "evil\x1b]0;pwned\x07\x1b[2J:1:r0"
    body = hello().to_body()
    body["engine"] = {"name": "\x1b[31mred", "version": "1"}
    try:
        proc = start_check(ep, "--timeout", "3")
        for seq in range(30):
            sock.send(encode(HELLO, src, seq, time.time(), body))
            time.sleep(0.1)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        sock.close(0)
    assert "\x1b" not in out + err
    assert "evil\\x1b]0;pwned\\x07" in out


def test_mistyped_command_is_named_and_does_not_open_the_monitor() -> None:
    r = subprocess.run(
        [*CLI, "chekc"], capture_output=True, text=True, timeout=HANG_GUARD_S, stdin=subprocess.DEVNULL
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "eagle3-top: 'chekc' is not a command nor an endpoint (tcp://HOST:PORT); did you mean 'check'?"
    ]


def test_the_monitor_refuses_to_draw_without_a_terminal() -> None:
    r = subprocess.run([*CLI, "tcp://127.0.0.1:5557"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 2 and "needs a terminal" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--timeout", "-1", "127.0.0.1:5557"], "'-1' must be a positive number"),
        (["--timeout", "nan", "127.0.0.1:5557"], "'nan' must be a positive number"),
        (["--steps", "0", "127.0.0.1:5557"], "'0' must be at least 1"),
        (["tcp://127.0.0.1:99999"], "port 99999 is outside 1-65535"),
        (["udp://x:1"], "unsupported transport"),
    ],
)
def test_bad_arguments_get_one_line_each(args: list[str], message: str) -> None:
    r = run_check(*args, timeout=HANG_GUARD_S)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_a_bad_endpoint_among_good_ones_is_skipped(pub: Publisher) -> None:
    pub.set_hello(hello())
    proc = start_check("tcp://127.0.0.1:99999", pub.bound_endpoint, "--min-steps", "5", "--timeout", "4")
    feed_while(proc, pub, 2, accepted=1)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert "port 99999 is outside 1-65535 (skipped)" in err
    assert proc.returncode == 0, out + err


def test_ctrl_c_is_an_answer_not_a_traceback(pub: Publisher) -> None:
    proc = start_check(pub.bound_endpoint, "--timeout", "60")
    wait_subscribed(pub)  # running its loop, past the imports
    proc.send_signal(2)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130
    assert err.strip() == "eagle3-top: interrupted" and out == ""


def test_probe_arguments_are_checked_up_front() -> None:
    r = subprocess.run(
        [*CLI, "probe", "--server", "127.0.0.1:30000", "--endpoint", "x:1", "--manifest", "m.json"],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert r.returncode == 2 and "expected an http:// or https:// URL" in r.stderr


def test_watch_stops_waiting_for_a_silent_source() -> None:
    """A source that stops sending anything (killed with SIGKILL: no goodbye) is gone after a
    few seconds of silence, not at the timeout."""
    from eagle3_top.tracer.analysis.check import watch

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    result: dict[str, object] = {}

    def run() -> None:
        result["r"] = watch([ep], None, timeout=3600, gone_after_s=1.5)

    t = threading.Thread(target=run)
    t.start()
    try:
        for seq in range(15):  # then silence, as from a killed process
            sock.send(encode(HELLO, "killed:1:r0", seq, time.time(), hello().to_body()))
            time.sleep(0.1)
        t.join(PATIENCE_S * 5)  # far short of watch's hour
    finally:
        sock.close(0)
    assert not t.is_alive(), "watch waited for the timeout, not for the silence"
    (rep,) = result["r"].reports  # type: ignore[attr-defined]
    assert rep.gone is not None and rep.gone.startswith("silent for")
    assert "went away: silent for" in rep.missing[-1]


def test_check_under_fuzzed_frames_gives_a_verdict_not_a_traceback() -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from fuzz_frames import frames

    sock = zmq.Context.instance().socket(zmq.XPUB)  # a PUB that says when the check has subscribed
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        proc = start_check(ep, "--timeout", "6", "--json")
        assert sock.poll(int(PATIENCE_S * 1000)), "the check never subscribed"
        sock.recv()
        for i, f in enumerate(frames(seed=5, count=20_000)):
            sock.send(f)
            if i % 1000 == 0:
                time.sleep(0.01)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        sock.close(0)
    assert "Traceback" not in err
    verdict = json.loads(out)
    # 1 when a fuzzed health frame carries an engine error (the verdict comes at once), else 3
    assert proc.returncode == verdict["exit_code"] in (1, 3)
    assert verdict["undecodable_frames"] > 0 and any(s["malformed"] for s in verdict["sources"])


def test_a_publisher_refuses_a_port_out_of_range() -> None:
    # libzmq would take 99999 modulo 2^16 and publish on another port than the one asked for
    from eagle3_top.tracer.serving.publisher import EndpointError, check_bind_endpoint

    for bad in ("tcp://127.0.0.1:99999", "tcp://127.0.0.1:", "tcp://127.0.0.1:-1"):
        with pytest.raises(EndpointError, match="is not 0-65535"):
            check_bind_endpoint(bad)
    check_bind_endpoint("tcp://127.0.0.1:0")
    check_bind_endpoint("tcp://127.0.0.1:*")


def test_a_prefill_crash_the_release_was_known_for_is_one_finding_naming_it(pub: Publisher) -> None:
    """Seen on SGLang 0.5.17 with a Llama target whose draft reads the embedding: the scheduler
    dies at the first prefill (``hidden_states + residual`` with no residual). The plugin's hook
    around the worker's step puts SGLang's own error on the wire; check names the release's defect
    as its cause, once, with the release that fixes it."""
    import dataclasses

    from eagle3_top.hooks.sglang.verify import make_around_forward
    from eagle3_top.tracer.serving.tracer import Tracer

    base = hello()
    h = dataclasses.replace(
        base,
        engine="sglang",
        engine_version="0.5.17",
        model=dataclasses.replace(base.model, arch="LlamaForCausalLM"),
    )
    pub.set_hello(h)
    proc = start_check(pub.bound_endpoint, "--json", "--timeout", "60")
    wait_subscribed(pub)  # the hello goes out on the subscription
    tracer = Tracer(pub)
    around = make_around_forward(lambda _w: tracer)

    def forward_batch_generation(_self: object, _batch: object) -> None:
        raise TypeError("unsupported operand type(s) for +: 'Tensor' and 'NoneType'")

    batch = type("Batch", (), {"forward_mode": type("Mode", (), {"name": "EXTEND"})()})()
    with pytest.raises(TypeError, match="NoneType"):  # SGLang still sees its own exception
        around(forward_batch_generation, object(), batch)
    out, _ = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 1, out
    findings = json.loads(out)["findings"]
    # the cause, with the crash it explains inside it: one finding
    assert [f["code"] for f in findings] == ["ENGINE_KNOWN_DEFECT"]
    (f,) = findings
    assert f["message"].startswith("the engine crashed (the extend step raised TypeError")
    assert "because SGLang 0.5.17 with a LlamaForCausalLM target" in f["message"]
    assert [e["code"] for e in f["evidence"]["explains"]] == ["ENGINE_FAILED"]
    assert f["evidence"]["case"] == "embedding" and f["evidence"]["fixed_in"] == "0.5.22"
    assert f["fix"].startswith("upgrade SGLang to 0.5.22")


def test_a_crash_heard_before_its_hello_is_judged_with_the_hello(pub: Publisher) -> None:
    """check subscribed after the engine failed: the crash comes in a health event, the hello (which
    carries the wiring that explains it) on subscribe or on its period; the verdict waits for it,
    briefly, and names both."""
    import dataclasses

    pub.engine_failed("RuntimeError: mat1 and mat2 shapes cannot be multiplied (384x128 and 192x64)")
    proc = start_check(pub.bound_endpoint, "--json", "--timeout", "60")
    wait_subscribed(pub)  # the crash goes out on the subscription, no hello yet
    h = hello()
    assert h.aux is not None
    pub.set_hello(dataclasses.replace(h, aux=dataclasses.replace(h.aux, width=128)))
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 1, err
    findings = json.loads(out)["findings"]
    # the width explains the crash: one finding, saying so
    width = next(f for f in findings if f["code"] == "AUX_WIDTH_MISMATCH")
    assert width["message"].startswith("the engine crashed (RuntimeError: mat1 and mat2 shapes")
    assert "ENGINE_FAILED" not in {f["code"] for f in findings}

    # a hello that never comes: the crash is judged alone once the grace is over, not at the timeout
    mute = Publisher("tcp://127.0.0.1:0", SourceId("gate-host", 4343, 0, "test"))
    try:
        mute.engine_failed("RuntimeError: before any hello")
        # judged once the grace is over: with an hour's timeout, run_check's bound would stop a wait for it
        r = run_check(mute.bound_endpoint, "--json", "--timeout", "3600", timeout=PATIENCE_S * 5)
        assert r.returncode == 1
        assert [f["code"] for f in json.loads(r.stdout)["findings"]] == ["ENGINE_FAILED"]
    finally:
        mute.close()


def test_the_fail_line_counts_the_sources_the_errors_are_on() -> None:
    """Two error findings, both on the mis-wired engine of two: the line says 1 of 2, not 2."""
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "check", "--replay", str(root / "examples" / "demo.mcap"),
         "--manifest", str(root / "examples" / "demo-manifest.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("FAIL: 2 error finding(s) on 1 of 2 source(s) after")


def test_steps_that_carry_no_request_are_no_evidence_of_acceptance(pub: Publisher) -> None:
    """A hello and any number of steps of batch 0: no request-step, no accept length: partial."""
    pub.set_hello(hello())
    proc = start_check(pub.bound_endpoint, "--steps", "1", "--timeout", "5", "--json")
    empty = step_body(step=0, rids=[], draft=np.zeros((0, 4), np.int32), accept_lens=np.zeros(0, np.int32),
                      tokens=np.zeros(0, np.int32))  # fmt: skip
    while proc.poll() is None:
        pub.publish(STEP, empty)
        time.sleep(0.05)
    out, err = proc.communicate()
    verdict = json.loads(out)
    assert proc.returncode == 3 and verdict["verdict"] == "partial", out + err
    (src,) = verdict["sources"]
    assert src["steps"] >= 1 and src["request_steps"] == 0 and src["accept_length"] is None
    assert src["missing"] == [
        f"request-steps: none in its {src['steps']} verify steps (each of batch 0): no acceptance seen"
    ]


def test_every_endpoint_named_must_be_heard(pub: Publisher, tmp_path: Path) -> None:
    """check A B with B silent (nothing listens there): A's evidence is complete and clean, yet the
    verdict is partial and names B, in the text, in --json, and for an --endpoints-file alike."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        silent = f"tcp://127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there
    pub.set_hello(hello())
    proc = start_check(pub.bound_endpoint, silent, "--steps", "5", "--timeout", "4", "--json")
    feed_while(proc, pub, 10, accepted=2)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    verdict = json.loads(out)
    assert proc.returncode == 3 and verdict["verdict"] == "partial", out + err
    (src,) = verdict["sources"]
    assert src["complete"] and not [f for f in verdict["findings"] if f["severity"] == "error"]
    (line,) = verdict["unheard_endpoints"]
    assert line.startswith(f"{silent}: nothing heard")
    listed = tmp_path / "endpoints.txt"
    listed.write_text(f"{pub.bound_endpoint}\n{silent}\n")
    proc = start_check("--endpoints-file", str(listed), "--steps", "5", "--timeout", "4")
    feed_while(proc, pub, 10, accepted=2)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 3, out + err
    assert f"endpoint {silent}: nothing heard" in out and "1 endpoint(s) said nothing" in out.splitlines()[-1]
