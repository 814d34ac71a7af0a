"""`eagle3-top --once [--json]`: one snapshot, no screen, as a script or a log would take it; the
same figures and findings the monitor shows. Real sockets, a real recording, the real command."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import HANG_GUARD_S, PATIENCE_S, wait_subscribed
from eagle3_top.tracer.schema import STEP, SourceId
from eagle3_top.tracer.serving.publisher import Publisher
from stream_samples import hello, step

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_once_on_the_shipped_recording_prints_the_table_and_the_findings() -> None:
    sample, manifest = str(EXAMPLES / "demo.mcap"), str(EXAMPLES / "demo-manifest.json")
    r = run("--replay", sample, "--manifest", manifest, "--once")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split()[:3] == ["source", "state", "acc"] and lines[1].rstrip().endswith("findings")
    rows = {line.split()[0]: line for line in lines[2:4]}
    lengths = sorted(float(row.split()[5]) for row in rows.values())  # key, engine, closed, 0s, ago, acc len
    assert lengths[0] < 1.5 < 3.5 < lengths[1]
    assert sum("none" in row for row in rows.values()) == 1 and any("errors" in row for row in rows.values())
    assert (
        "ERROR   LAYER_IDS_NOT_READ" in r.stdout
        and "fix: put eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 2, 5] in the draft's config.json"
        in r.stdout
    )

    j = run("--replay", sample, "--manifest", manifest, "--json")  # --json implies --once
    assert j.returncode == 0, j.stderr
    out = json.loads(j.stdout)  # strict JSON: no NaN anywhere
    assert out["schema"] == "eagle3-top-snapshot/1" and len(out["sources"]) == 2
    by_len = sorted(out["sources"], key=lambda s: s["acceptance"]["accept_length"])
    bad, good = by_len
    assert f"{bad['acceptance']['accept_length']:.2f}" in rows[bad["key"]]  # the text's figure
    assert "LAYER_IDS_NOT_READ" in {f["code"] for f in bad["findings"]} and not good["findings"]
    assert bad["acceptance"]["expected_by"] == "the manifest's training metrics"
    assert len(bad["acceptance"]["training_acc"]) == 3 and bad["layer_map"][0]["layer_ok"] is False
    assert bad["hello"]["aux"]["ids_location"] == "top_level" and bad["state"].startswith("closed")
    assert all(len(p["proposals"]) == len(p["on_accepted_path"]) for p in bad["proposals"])
    # the fleet view's merged figure weighs each source by the request-steps it served
    fleet = out["fleet"]
    hists = [s["acceptance"]["histogram"] for s in out["sources"]]
    steps = sum(n for h in hists for n in h.values())
    tokens = sum(int(k) * n for h in hists for k, n in h.items())
    assert fleet["sources"] == 2 and fleet["request_steps"] == steps
    assert abs(fleet["accept_length"] - tokens / steps) < 1e-9
    assert fleet["worst_first"][0] == bad["key"]
    assert any(
        g.startswith(f"LAYER_IDS_NOT_READ on 1 of 2 sources: {bad['key']}") for g in fleet["finding_groups"]
    )


def test_once_live_listens_until_told_and_prints_what_it_heard() -> None:
    """``-i`` is how long it may listen; SIGTERM (or Ctrl-C) ends it early and it prints what it heard,
    as ping does: a script listens for as long as its load runs, then asks."""
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(engine="test"), hello_interval_s=0.5)
    pub.set_hello(hello())
    stop = threading.Event()

    def steps() -> None:
        i = 0
        while not stop.is_set():
            pub.publish(STEP, step(i, max_accept=4))
            i += 1
            time.sleep(0.01)

    t = threading.Thread(target=steps, daemon=True)
    try:
        proc = subprocess.Popen(
            [*CLI, pub.bound_endpoint, "--json", "-i", "3600"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wait_subscribed(pub)
        t.start()
        wait_sent(pub, 60)
        proc.terminate()
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        pub.close()
    assert proc.returncode == 0, err
    snap = json.loads(out)
    (src,) = snap["sources"]
    assert src["state"] == "live" and src["events"]["hellos"] >= 1 and src["events"]["steps"] >= 50
    assert 1.0 < src["acceptance"]["accept_length"] <= 4.0
    assert snap["endpoints"] == [{"endpoint": pub.bound_endpoint, "state": "connected"}]


def wait_sent(pub: Publisher, frames: int) -> None:
    before = pub.sent
    deadline = time.monotonic() + PATIENCE_S
    while pub.sent < before + frames:
        assert time.monotonic() < deadline, f"{pub.sent - before} of {frames} frames sent"
        time.sleep(0.01)


def test_once_with_nobody_there_says_so_and_exits_3() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run(f"tcp://127.0.0.1:{port}", "--once", "-i", "0.5")
    assert r.returncode == 3 and "(no source heard)" in r.stdout
    j = run(f"tcp://127.0.0.1:{port}", "--json", "-i", "0.5")
    assert j.returncode == 3 and json.loads(j.stdout)["sources"] == []


def test_interval_and_once_arguments_are_checked() -> None:
    for args, why in {
        ("-i", "0"): "seconds between 0.05 and 86400",
        ("-i", "nan"): "seconds between 0.05 and 86400",
        ("-i", "61"): "-i 61: a screen refreshes at least every 60 s (longer only with --once)",
        ("--replay", str(EXAMPLES / "demo.mcap"), "--once", "--follow"): "give no --follow",
    }.items():
        r = run(*args)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_baseline_says_whether_speculation_pays_off() -> None:
    """The motivating case: speculation running slower than the same server without it. The
    healthy engine beats a 300 tok/s baseline, the mis-wired one does not, and the break-even
    accept length is the measured one scaled by baseline / measured."""
    sample = str(EXAMPLES / "demo.mcap")
    r = run("--replay", sample, "--json", "--baseline-tok-s", "300")
    assert r.returncode == 0, r.stderr
    srcs = sorted(json.loads(r.stdout)["sources"], key=lambda s: s["acceptance"]["accept_length"])
    bad, good = srcs
    for s in srcs:
        p = s["payoff"]
        assert p["baseline_tok_s"] == 300 and p["speedup"] == p["tok_s"] / 300
        assert abs(p["break_even_accept_length"] - p["accept_length"] * 300 / p["tok_s"]) < 1e-9
    assert bad["payoff"]["speedup"] < 1 < good["payoff"]["speedup"]
    # the mis-wired source's cause (the ids not read) explains its slowness: inside it, not beside it
    (cause,) = [f for f in bad["findings"] if f["code"] == "LAYER_IDS_NOT_READ"]
    slower = [f for f in cause["evidence"]["explains"] if f["code"] == "SPECULATION_SLOWER_THAN_BASELINE"]
    assert len(slower) == 1 and cause["severity"] == "error"
    assert "without speculation" in cause["message"]
    assert not any(f["code"] == "SPECULATION_SLOWER_THAN_BASELINE" for f in bad["findings"])
    assert slower[0]["evidence"]["break_even_accept_length"] == bad["payoff"]["break_even_accept_length"]
    assert not any(f["code"] == "SPECULATION_SLOWER_THAN_BASELINE" for f in good["findings"])
    text = run("--replay", sample, "--once", "--baseline-tok-s", "300").stdout
    assert "without speculation (x0." in text and "break-even accept length" in text
    plain = json.loads(run("--replay", sample, "--json").stdout)  # no baseline, no verdict on it
    assert all(s["payoff"] is None for s in plain["sources"])
    assert "SPECULATION_SLOWER_THAN_BASELINE" not in json.dumps(plain)
    for bad_value in ("0", "-5", "fast", "inf"):
        b = run("--replay", sample, "--once", "--baseline-tok-s", bad_value)
        assert b.returncode == 2 and "a positive number" in b.stderr, bad_value
