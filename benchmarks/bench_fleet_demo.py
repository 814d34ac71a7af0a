"""How heavy `eagle3-top demo --fleet N` is: N built-in engines at the fleet's pace, against one
engine measured in the same run. Per engine: CPU (of one core), resident memory, and the verify
steps/s it reached against the pace asked (an overloaded box falls behind, it does not fail).

    python -m benchmarks.bench_fleet_demo [--engines 8] [--rate 10] [--seconds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter

from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import STEP
from eagle3_top.tui.commands.demo import FLEET_RATE, free_port_run

from benchmarks.common import cpu_s, machine, rss_mb


def run(n: int, rate: float, seconds: float) -> tuple[float, float, float]:
    """Per engine: CPU share of one core, MB resident, steps/s reached."""
    first = free_port_run(n)
    endpoints = [f"tcp://127.0.0.1:{first + i}" for i in range(n)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eagle3_top.hooks.toy_main",
                "--publish",
                ep,
                "--max-steps-per-s",
                str(rate),
                "--rank",
                str(i),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for i, ep in enumerate(endpoints)
    ]
    sub = Subscriber(endpoints)
    try:
        heard: set[str] = set()
        deadline = time.monotonic() + 120
        while len(heard) < n and time.monotonic() < deadline:  # start-up: torch imports
            heard.update(ev.src for ev in sub.poll(100) if ev.kind == STEP)
        if len(heard) < n:
            raise SystemExit(f"only {len(heard)} of {n} engines stepped within 120 s")
        cpu0 = sum(cpu_s(p.pid) for p in procs)
        t0 = time.monotonic()
        steps: Counter[str] = Counter()
        while time.monotonic() - t0 < seconds:
            steps.update(ev.src for ev in sub.poll(100) if ev.kind == STEP)
        wall = time.monotonic() - t0
        cpu = (sum(cpu_s(p.pid) for p in procs) - cpu0) / wall / n
        rss = sum(rss_mb(p.pid) for p in procs) / n
        return cpu, rss, sum(steps.values()) / wall / n
    finally:
        sub.close()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engines", type=int, default=8)
    ap.add_argument("--rate", type=float, default=FLEET_RATE, help="verify steps/s asked of each engine")
    ap.add_argument("--seconds", type=float, default=10.0)
    ns = ap.parse_args(argv)
    print(f"# bench_fleet_demo: {machine()}; {ns.rate:g} steps/s asked of each engine")
    base = run(1, ns.rate, ns.seconds)
    fleet = run(ns.engines, ns.rate, ns.seconds)
    for label, (cpu, rss, rate) in (("1 engine", base), (f"{ns.engines} engines", fleet)):
        print(f"{label:>11}: {cpu * 100:5.1f}% of a core, {rss:4.0f} MB, {rate:5.1f} steps/s each")
    print(
        f"fleet of {ns.engines}: {fleet[0] * ns.engines * 100:.0f}% of a core in all, "
        f"{fleet[1] * ns.engines / 1024:.1f} GB; per engine vs alone: CPU x{fleet[0] / base[0]:.2f}, "
        f"pace x{fleet[2] / base[2]:.2f}"
    )


if __name__ == "__main__":
    main()
