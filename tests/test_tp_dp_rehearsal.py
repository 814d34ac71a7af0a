"""benchmarks/gpu/run_tp_dp.sh's data-parallel half, rehearsed on CPU: two built-in engines stand in
for SGLang's two DP replicas (ranks 0 and 1, each behind SGLang's /generate), with the same pieces
the GPU script runs: the plain pyzmq recorders, `eagle3-top relay`, `check` and the fleet view's
`--once --json` through the relay, real_pair_client.py's workload, and tp_dp_report.py's judgment.
What the GPU run must show, shown here on real frames; and what the report must catch."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_GUARD_S, PATIENCE_S
from toy_process import CLI, Toy

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
MANIFEST = str(ROOT / "examples" / "demo-manifest.json")  # the bundled healthy draft's training
# Enough for check's evidence on each replica, however fast the box: 200 request-steps, and 256 aux
# rows (a fingerprint at every verify step, not every 0.1 s: a time-based count depends on the load)
PER_REPLICA, NEW_TOKENS = 16, 96


def report() -> Any:
    sys.path.insert(0, str(GPU))
    try:
        import tp_dp_report

        return tp_dp_report
    finally:
        sys.path.remove(str(GPU))


def workload(path: Path, rng: np.random.Generator, n: int) -> None:
    prompts = [rng.integers(5, 250, size=int(rng.integers(8, 16))).tolist() for _ in range(n)]
    path.write_text(
        json.dumps({"prompts": prompts, "continuations": [[] for _ in prompts], "new_tokens": NEW_TOKENS})
    )


def wait_for(paths: list[Path], timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"never appeared: {[str(p) for p in paths if not p.exists()]}"
        time.sleep(0.05)


def wait_connected_to(pid: int, port: int) -> None:
    """Until process ``pid`` holds an established TCP connection to ``port`` on this host."""
    import psutil

    deadline = time.monotonic() + PATIENCE_S
    while not any(
        c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        for c in psutil.Process(pid).net_connections(kind="tcp")
    ):
        assert time.monotonic() < deadline, f"process {pid} never connected to port {port}"
        time.sleep(0.05)


def merge_clients(w: Path, parts: list[Path]) -> None:
    """One client result over both replicas, as the DP server's single /generate gives it."""
    reqs = [r for p in parts for r in json.loads(p.read_text())["requests"]]
    tokens = sum(r["meta_info"]["completion_tokens"] for r in reqs)
    verify = sum(r["meta_info"]["spec_verify_ct"] for r in reqs)
    summary = {"requests": len(reqs), "accept_length": tokens / verify}
    (w / "client_DP.json").write_text(json.dumps({"requests": reqs, "summary": summary}))


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    w = tmp_path_factory.mktemp("tp_dp")
    reps = [Toy("--rank", str(i), "--aux-interval", "0") for i in (0, 1)]
    procs: list[subprocess.Popen[str]] = []
    try:
        for t in reps:
            t.wait_ready()
        # the relay binds a port of its own choosing and names it (a port picked here could be taken)
        procs.append(
            subprocess.Popen(
                [*CLI, "relay", "--bind", "tcp://127.0.0.1:*", "--connect", *(t.endpoint for t in reps), "--quiet"],
                stderr=subprocess.PIPE, text=True,
            )
        )  # fmt: skip
        assert procs[0].stderr is not None
        started = procs[0].stderr.readline()
        assert " to tcp://" in started, started
        relay = started.rsplit(" to ", 1)[1].strip()
        check = subprocess.Popen(
            # returns once it has its evidence; the timeout only bounds a failure
            [*CLI, "check", relay, "--manifest", MANIFEST, "--json", "--steps", "5", "--timeout", "600"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        once = subprocess.Popen(
            # listens until told (SIGTERM, below), not for a time a loaded box may overrun
            [*CLI, relay, "--manifest", MANIFEST, "--json", "-i", "3600"],
            stdout=subprocess.PIPE,
            text=True,
        )
        tags = {"DP0": reps[0].endpoint, "DP1": reps[1].endpoint, "DPR": relay}
        for tag, ep in tags.items():
            procs.append(
                subprocess.Popen([sys.executable, str(GPU / "subscriber_check.py"), tag, ep, "120", str(w)])
            )
        wait_for([w / f"heard_{tag}" for tag in tags])  # every recorder is subscribed (health, 1 Hz)
        for p in (check, once):  # connected to the relay: their subscriptions follow the handshake
            wait_connected_to(p.pid, int(relay.rsplit(":", 1)[1]))
        time.sleep(0.5)  # the subscription's own trip, as conftest.wait_connected allows it
        rng = np.random.default_rng(7)
        parts, clients = [], []
        for i, t in enumerate(reps):  # the DP controller's share-out: half the requests each, at once
            workload(w / f"workload_{i}.json", rng, PER_REPLICA)
            parts.append(w / f"client_{i}.json")
            port = t.url.rsplit(":", 1)[1]
            clients.append(subprocess.Popen(
                [sys.executable, str(GPU / "real_pair_client.py"), port, str(w / f"workload_{i}.json"),
                 str(parts[-1]), f"e3tdp{i}"],
                stdout=subprocess.DEVNULL,
            ))  # fmt: skip
        t0 = time.monotonic()
        assert [c.wait(timeout=HANG_GUARD_S) for c in clients] == [0, 0]
        print(f"workload served in {time.monotonic() - t0:.1f} s")
        merge_clients(w, parts)
        out, err = check.communicate(timeout=HANG_GUARD_S)
        (w / "check_DP.json").write_text(out)
        (w / "check_DP.rc").write_text(f"{check.returncode}\n")
        once.terminate()  # prints what it heard, as ping does
        (w / "once_DP.json").write_text(once.communicate(timeout=PATIENCE_S)[0])
        time.sleep(0.5)
        for tag in tags:
            (w / f"stop_{tag}").touch()
        for p in procs[1:]:
            p.wait(timeout=HANG_GUARD_S)
        (w / "ready.txt").write_text("DP ready=1 after 0 s\n")
        return w
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=HANG_GUARD_S)
        for t in reps:
            t.stop()


def test_the_dp_half_passes_on_two_replicas(rehearsal: Path) -> None:
    short: list[str] = []
    lines = report().dp_part(str(rehearsal), short)
    assert short == [], "\n".join(lines)
    text = "\n".join(lines)
    assert (
        f"histograms = meta_info {2 * PER_REPLICA}/{2 * PER_REPLICA}" in text
    )  # merged: every request, step for step
    assert "check through the relay: exit 0" in text and "sources 2" in text
    events = [json.loads((rehearsal / f"events_DP{i}.json").read_text()) for i in (0, 1)]
    assert [e["hello"]["src"].rsplit(":", 1)[1] for e in events] == ["r0", "r1"]
    fleet = json.loads((rehearsal / "once_DP.json").read_text())["fleet"]
    recorded = sum(len(rows) for e in events for rows in e["rows"].values())
    # the monitor subscribed before the workload began, give or take its interpreter's start
    assert fleet["sources"] == 2 and 0.9 * recorded <= fleet["request_steps"] <= recorded


def test_the_report_catches_a_relay_that_lost_steps_and_a_replica_gone_silent(
    rehearsal: Path, tmp_path: Path
) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(rehearsal, broken)
    relayed = json.loads((broken / "events_DPR.json").read_text())
    relayed["kinds"]["step"] -= 1
    (broken / "events_DPR.json").write_text(json.dumps(relayed))
    (broken / "events_DP1.json").write_text(json.dumps({"kinds": {}, "rows": {}}))
    short: list[str] = []
    report().dp_part(str(broken), short)
    assert any(s.startswith("DP: the relay passed") for s in short)
    assert any(s.startswith("DP: replica 1 served 0 requests") for s in short)
    assert any("not split one replica each" in s for s in short)
