"""The monitor with a fleet: 64 sources at 100 step events/s each (batch 64 x 4), the fleet
summary taken with every snapshot, as the main screen's headline and the fleet view do.

A child process (spawn, niced: they stand for servers on other machines) runs the publishers
(``bench_monitor_load``'s, paced). In this process, one
after the other in the same run:

1. raw: a bare pyzmq SUB on the 64 endpoints, ``recv`` + ``msgpack.unpackb`` (the floor);
2. feed: the monitor's real ``Feed`` for ``--seconds``, a snapshot and its ``fleet_summary`` once a
   refresh interval (0.25 s, the app's 4 Hz). Kept up means: missed stays 0, the receive lag (wall
   clock at ingest less the event's ``ts``) in the last third no higher than in the first, RSS at
   the end close to RSS a third of the way in.

Reported: events/s received vs published, missed, CPU of a core (x the raw SUB's), lag p50/p99 in
the first and last third, RSS at 1/3 and at the end, snapshot and fleet summary times p50/p90/max
(their sum against the 5 ms budget). The snapshot also as its thread's CPU time: the wall time less
the waits for the ingest thread (the GIL, the book's lock), which a 2-core box lengthens.

    python -m benchmarks.bench_fleet_load [--sources 64] [--rate 100] [--seconds 30]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

from .bench_monitor_load import _cpu, _publishers, add_load_arguments, measure_raw
from .common import machine, rss_mb

BUDGET_MS = 5.0


def _remote_publishers(*args) -> None:  # type: ignore[no-untyped-def]
    # Niced: in a fleet the servers run on other machines; here they share the 2 cores with the
    # monitor, and at normal priority they would take the monitor's core away in bursts.
    os.nice(10)
    _publishers(*args)


def _pcts(xs: list[float]) -> tuple[float, float, float]:
    a = np.asarray(xs)
    return float(np.median(a)), float(np.percentile(a, 90)), float(a.max())


def measure_fleet(endpoints: list[str], seconds: float, interval: float) -> dict:
    from eagle3_top.tui.feed import Feed
    from eagle3_top.tui.fleet import fleet_summary

    feed = Feed(endpoints)
    lags: list[tuple[float, float]] = []  # (when, lag)
    ingest = feed.book.ingest

    def timed_ingest(events, now, on_malformed=None):  # type: ignore[no-untyped-def]
        if events:
            lags.append((time.monotonic(), time.time() - events[-1].ts))
        return ingest(events, now, on_malformed)

    feed.book.ingest = timed_ingest  # type: ignore[method-assign]
    feed.start()
    deadline = time.monotonic() + 30
    while len(feed.book.sources) < len(endpoints) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # every source's first hello and steps in
    missed0 = sum(s.missed for s in feed.snapshot().sources)
    lags.clear()
    snap_ms: list[float] = []
    fleet_ms: list[float] = []
    snap_cpu_ms: list[float] = []  # this thread's CPU: the work, without the wait for the GIL/lock
    rss_third = 0.0
    e0, c0, t0, m0 = feed.book.events, _cpu(), time.perf_counter(), time.monotonic()
    ticks = 0
    while time.perf_counter() - t0 < seconds:
        time.sleep(max(0.0, t0 + (ticks + 1) * interval - time.perf_counter()))
        c_0, s0 = time.thread_time(), time.perf_counter()
        snap = feed.snapshot()
        s1, c_1 = time.perf_counter(), time.thread_time()
        snap_cpu_ms.append((c_1 - c_0) * 1e3)
        fleet = fleet_summary(snap)
        s2 = time.perf_counter()
        snap_ms.append((s1 - s0) * 1e3)
        fleet_ms.append((s2 - s1) * 1e3)
        ticks += 1
        if not rss_third and s2 - t0 >= seconds / 3:
            rss_third = rss_mb(os.getpid())
    dt = time.perf_counter() - t0
    cpu = _cpu() - c0
    events = feed.book.events - e0
    rss_end = rss_mb(os.getpid())
    feed.stop()
    third = seconds / 3
    first = [lag for t, lag in lags if t - m0 < third]
    last = [lag for t, lag in lags if t - m0 >= 2 * third]
    total = [a + b for a, b in zip(snap_ms, fleet_ms, strict=True)]
    return {
        "events_per_s": events / dt,
        "cpu_per_s": cpu / dt,
        "sources": fleet.sources,
        "missed": sum(s.missed for s in snap.sources) - missed0,
        "lag_first_ms": (np.percentile(first, 50) * 1e3, np.percentile(first, 99) * 1e3),
        "lag_last_ms": (np.percentile(last, 50) * 1e3, np.percentile(last, 99) * 1e3),
        "rss_third_mb": rss_third,
        "rss_end_mb": rss_end,
        "snapshot_ms": _pcts(snap_ms),
        "snapshot_cpu_ms": _pcts(snap_cpu_ms),
        "fleet_ms": _pcts(fleet_ms),
        "total_ms": _pcts(total),
        "request_steps": fleet.request_steps,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    add_load_arguments(ap, sources=64, rate=100.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--raw-seconds", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=0.25)
    args = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    total = args.raw_seconds + args.seconds + 40
    proc = ctx.Process(
        target=_remote_publishers,
        args=(q, stop, args.sources, args.rate, args.batch, args.n, total),
        daemon=True,
    )
    proc.start()
    endpoints = q.get(timeout=60)
    try:
        time.sleep(1.0)
        raw = measure_raw(endpoints, args.raw_seconds)
        feed = measure_fleet(endpoints, args.seconds, args.interval)
    finally:
        stop.set()
        pub = q.get(timeout=60)
        proc.join(10)
    offered = args.sources * args.rate
    print(f"machine: {machine()}")
    print(
        f"load: {args.sources} sources x {args.rate:,.0f} step events/s (batch {args.batch} x {args.n}), "
        f"{args.seconds:g} s, a snapshot + fleet summary every {args.interval:g} s"
    )
    print(f"raw SUB + unpackb : {raw['events_per_s']:,.0f} events/s, {raw['cpu_per_s']:.1%} of a core")
    print(
        f"monitor feed      : {feed['events_per_s']:,.0f} events/s ({feed['events_per_s'] / offered:.2f} of "
        f"offered), {feed['missed']} missed, {feed['sources']} sources, {feed['cpu_per_s']:.1%} of a core "
        f"(x{feed['cpu_per_s'] / max(raw['cpu_per_s'], 1e-9):.2f} the raw SUB's)"
    )
    lf, ll = feed["lag_first_ms"], feed["lag_last_ms"]
    print(
        f"lag: first third p50 {lf[0]:.0f} ms p99 {lf[1]:.0f} ms; last third p50 {ll[0]:.0f} ms "
        f"p99 {ll[1]:.0f} ms"
    )
    print(
        f"RSS: {feed['rss_third_mb']:.0f} MB at {args.seconds / 3:.0f} s, {feed['rss_end_mb']:.0f} MB at "
        f"{args.seconds:.0f} s (x{feed['rss_end_mb'] / max(feed['rss_third_mb'], 1e-9):.2f})"
    )
    labels = {
        "snapshot": "snapshot",
        "snapshot_cpu": "  its thread CPU",
        "fleet": "fleet summary",
        "total": "snapshot + fleet",
    }
    for name, label in labels.items():
        p50, p90, mx = feed[f"{name}_ms"]
        print(f"{label:17s}: p50 {p50:.2f} ms, p90 {p90:.2f} ms, max {mx:.2f} ms")
    p90 = feed["total_ms"][1]
    print(f"budget: p90 {p90:.2f} ms of {BUDGET_MS:g} ms ({'within' if p90 <= BUDGET_MS else 'OVER'})")
    print(f"publisher: {pub['sent']:,} sent; {feed['request_steps']:,} request-steps merged")


if __name__ == "__main__":
    main()
