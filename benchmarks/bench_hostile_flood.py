"""The live monitor under a publisher that invents a source per frame: the real app (headless, via
Textual's test driver), fed over a real loopback socket. Baseline, same run: the app's RSS after the
first 10,000 frames; figures: RSS after all of them, sources held, rows in the sources table, and
how long Tab takes to move to the next source.

    python -m benchmarks.bench_hostile_flood [--frames 240000]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time

import zmq
from eagle3_top.tracer.schema import HELLO, encode

from benchmarks.common import machine


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


async def run(frames: int) -> None:
    from eagle3_top.tui.app import Eagle3TopApp

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    app = Eagle3TopApp([ep], refresh_hz=4)
    body = {"engine": {"name": "x"}, "model": {"arch": "y" * 64}}
    async with app.run_test(size=(120, 36)) as pilot:
        while app.latest is None or app.latest.endpoints[0][1] != "connected":
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        base = None
        t0 = time.perf_counter()
        for i in range(frames):
            sock.send(encode(HELLO, f"fake{i}:{i}:r0", 0, time.time(), body))
            if i % 2000 == 1999:
                await pilot.pause(0.01)
            if i == 10_000:
                await pilot.pause(0.5)
                base = rss_mb()
        while app.latest is None or app.latest.frames < frames:
            await pilot.pause(0.1)
        await pilot.pause(1.0)
        fed = time.perf_counter() - t0
        end = rss_mb()
        rows = app.query_one("#sources").row_count
        t1 = time.perf_counter()
        await pilot.press("tab")
        await pilot.pause(0)
        tab = time.perf_counter() - t1
        snap = app.latest
        sock.close(0)
    assert base is not None
    print(f"# bench_hostile_flood: {frames:,} frames, each from a new source id, on {machine()}")
    print(f"  RSS after 10,000 frames   {base:8.1f} MB (baseline)")
    print(f"  RSS after {frames:,} frames {end:8.1f} MB  (x{end / base:.2f} of the baseline)")
    forgotten = getattr(snap, "evicted_sources", None)  # None: a monitor that forgets nothing
    print(f"  sources held {len(snap.sources)}, forgotten {forgotten}, table rows {rows}")
    print(f"  fed in {fed:.1f}s ({frames / fed:,.0f} frames/s); Tab to the next source {tab * 1e3:.0f} ms")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=240_000)
    ns = ap.parse_args(argv)
    asyncio.run(run(ns.frames))


if __name__ == "__main__":
    main()
