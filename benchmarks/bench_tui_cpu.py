"""What the live monitor costs next to the servers it watches: CPU and memory of `eagle3-top`
drawing in a real terminal (tmux, 120x30), tailing two sources.

Each source is a real ``Publisher`` in a child process sending what the built-in engine sends: a
hello, step events of batch 8 x 4, an aux fingerprint every 0.5 s, health every second; together
``--rate`` step events/s. Measured from /proc over ``--seconds`` after a warm-up: the monitor's CPU
(all its threads) as a share of one core, per 1,000 events/s, and its RSS. Baseline in the same
run, same stream: a bare pyzmq SUB + ``msgpack.unpackb`` process (the floor for receiving at all).

    python -m benchmarks.bench_tui_cpu [--rate 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import subprocess
import sys
import time
import uuid

from benchmarks.common import cpu_s, machine, rss_mb


def _publish(q, stop, rate: float) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    from eagle3_top.tracer.schema import AUX, STEP, Fingerprint, SourceId, aux_body, step_body
    from eagle3_top.tracer.serving.publisher import Publisher

    from benchmarks.bench_record import _hello

    pubs = [Publisher("tcp://127.0.0.1:0", SourceId("bench", 1000 + i, 0, "toy")) for i in range(2)]
    for p in pubs:
        p.set_hello(_hello())
    q.put([p.bound_endpoint for p in pubs])
    rng = np.random.default_rng(0)
    bodies = []
    for i in range(16):
        acc = rng.integers(0, 4, 8).astype(np.int32)
        bodies.append(
            step_body(
                step=i, rids=[f"toy-{i * 8 + j}" for j in range(8)],
                draft=rng.integers(1, 32_000, (8, 4)).astype(np.int32), accept_lens=acc + 1,
                tokens=rng.integers(1, 32_000, int(acc.sum()) + 8).astype(np.int32),
            )
        )  # fmt: skip
    fp = Fingerprint(
        rows=32, slots=3, slot_width=4096, mean=(0.0, 0.1, 0.2), rms=(1.0, 1.1, 1.2), std=(1.0, 1.1, 1.2),
        absmax=(9.0, 9.5, 10.0), nan=(0, 0, 0), inf=(0, 0, 0),
        sketch=tuple(tuple(float(x) for x in rng.normal(0, 1, 16)) for _ in range(3)),
    )  # fmt: skip
    t0 = time.monotonic()
    i = 0
    next_aux = t0
    while not stop.is_set():
        ahead = t0 + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        pubs[i % 2].publish(STEP, dict(bodies[i & 15], step=i))
        if time.monotonic() >= next_aux:
            next_aux += 0.5
            for p in pubs:
                p.publish(AUX, aux_body(i, "fc_input", fp))
        i += 1
    for p in pubs:
        p.close()


def _raw(endpoints: list[str], stop) -> None:  # type: ignore[no-untyped-def]
    import msgpack
    import zmq

    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    for ep in endpoints:
        sock.connect(ep)
    while not stop.is_set():
        if sock.poll(100):
            while True:
                try:
                    msgpack.unpackb(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break


def share(pid: int, seconds: float) -> float:
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def monitor_pid(session: str) -> int:
    """The monitor's python process: the pane's shell command is `exec`ed, so it is the pane pid."""
    out = subprocess.run(
        ["tmux", "display", "-p", "-t", session, "#{pane_pid}"], capture_output=True, text=True
    )
    return int(out.stdout.strip())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=100.0, help="step events/s, both sources together")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--interval", type=float, help="the monitor's -i (default: its own)")
    ns = ap.parse_args(argv)
    if shutil.which("tmux") is None:
        print("# bench_tui_cpu: needs tmux, skipped")
        return
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    pub = ctx.Process(target=_publish, args=(q, stop, ns.rate), daemon=True)
    pub.start()
    endpoints = q.get(timeout=60)
    session = f"bench-{uuid.uuid4().hex[:8]}"
    interval = [] if ns.interval is None else ["-i", str(ns.interval)]
    cmd = f"exec env -u COLUMNS -u LINES {sys.executable} -m eagle3_top.tui.cli {' '.join(endpoints + interval)}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "30", cmd], check=True)
    raw = ctx.Process(target=_raw, args=(endpoints, stop), daemon=True)
    raw.start()
    try:
        pid = monitor_pid(session)
        time.sleep(ns.warmup)
        app, floor = share(pid, ns.seconds), share(raw.pid or 0, ns.seconds)
        rss = rss_mb(pid)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        stop.set()
        pub.join(10)
        raw.join(10)
    every = "" if ns.interval is None else f", -i {ns.interval:g}"
    print(f"# bench_tui_cpu ({machine()}): two sources, {ns.rate:,.0f} step events/s, tmux 120x30{every}")
    print(
        f"  monitor {app:6.1%} of a core ({app / ns.rate * 1000:.1%} per 1,000 events/s), RSS {rss:.0f} MB;"
        f" raw SUB + unpackb {floor:6.1%}"
    )


if __name__ == "__main__":
    main()
