"""The monitor's receive side under a fleet's load: 8 sources at 1,000 step events/s each
(batch 64 x 4, SGLang-like rids that live ~100 steps), the requests view and a timeline open.

A child process (spawn) runs 8 real ``Publisher``s, paced. In this process, one after the other in
the same run:

1. raw: a bare pyzmq SUB on the 8 endpoints, ``recv`` + ``msgpack.unpackb`` (the floor);
2. feed: the monitor's real path (``Feed`` thread: receive, decode, ``EvidenceBook.ingest``, the
   per-request fold 4x a second, the findings) while this thread takes a ``Snapshot`` once per
   refresh interval (1 s), with the first source's request table and a running request's timeline
   copied out, as the requests and timeline screens ask;
3. once: ``eagle3-top --once --json -i 1`` against the same 8 endpoints, as a subprocess: the wall
   time from start to answer, and whether all 8 sources are in it.

Reported: events/s received vs published, missed, CPU of this process per second (feed) against the
raw SUB's, snapshot time p50/max, the fold's share, lag.

    python -m benchmarks.bench_monitor_load [--sources 8] [--rate 1000] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import subprocess
import sys
import time

import msgpack
import numpy as np
import zmq

from .common import machine

LIFE = 100  # steps a request lives


def _bodies(batch: int, n: int, src: int, count: int = 256) -> list[dict]:
    from eagle3_top.tracer.schema import step_body

    rng = np.random.default_rng(src)
    out = []
    for i in range(count):
        # request r joins at step r * LIFE / batch: a steady batch of requests at different ages
        first = max(0, (i * batch) // LIFE - batch + 1)
        rids = [f"{src:02d}{(r * 2654435761) & 0xFFFFFFFF:08x}{r:022x}" for r in range(first, first + batch)]
        acc = rng.integers(0, n, batch).astype(np.int32)
        draft = rng.integers(1, 128_000, (batch, n)).astype(np.int32)
        tokens = rng.integers(1, 128_000, int(acc.sum()) + batch).astype(np.int32)
        out.append(step_body(step=i, rids=rids, draft=draft, accept_lens=acc + 1, tokens=tokens, dt=0.004))
    return out


def _publishers(q_out, stop, sources: int, rate: float, batch: int, n: int, seconds: float) -> None:
    from eagle3_top.tracer.schema import STEP, Hello, SourceId
    from eagle3_top.tracer.serving.publisher import Publisher

    pubs = []
    for s in range(sources):
        sid = SourceId(host="bench", pid=1000 + s, rank=0, engine="bench")
        p = Publisher("tcp://127.0.0.1:0", sid, queue_size=8192, sndhwm=100_000)
        p.set_hello(Hello(engine="bench"))
        pubs.append(p)
    q_out.put([p.bound_endpoint for p in pubs])
    bodies = [_bodies(batch, n, s) for s in range(sources)]
    t0 = time.monotonic()
    deadline = t0 + seconds
    i = 0
    while not stop.is_set() and time.monotonic() < deadline:
        ahead = t0 + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        for s, p in enumerate(pubs):
            p.publish(STEP, bodies[s][i % len(bodies[s])])
        i += 1
    sent = sum(p.sent for p in pubs)
    for p in pubs:
        p.close(0.5)
    q_out.put({"steps_each": i, "sent": sent})


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure_raw(endpoints: list[str], seconds: float) -> dict:
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    for ep in endpoints:
        sock.connect(ep)
    sock.poll(10_000)
    n = 0
    c0, t0 = _cpu(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if sock.poll(100):
            msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
            n += 1
    dt = time.perf_counter() - t0
    cpu = _cpu() - c0
    sock.close(0)
    return {"events_per_s": n / dt, "cpu_per_s": cpu / dt}


def measure_feed(endpoints: list[str], seconds: float, interval: float) -> dict:
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tui.feed import Feed

    fold_s: list[float] = []
    lags: list[float] = []

    class TimedBook(EvidenceBook):
        def ingest(self, events, now, on_malformed=None):
            if events:
                lags.append(time.time() - events[-1].ts)
            return super().ingest(events, now, on_malformed)

    from eagle3_top.tracer.analysis.requests import RequestTracker

    fold = RequestTracker.fold

    def timed_fold(self: RequestTracker) -> int:
        t = time.perf_counter()
        n = fold(self)
        fold_s.append(time.perf_counter() - t)
        return n

    RequestTracker.fold = timed_fold  # type: ignore[method-assign]
    feed = Feed(endpoints, book=TimedBook()).start()
    deadline = time.monotonic() + 15
    while len(feed.book.sources) < len(endpoints) and time.monotonic() < deadline:
        time.sleep(0.01)
    first = sorted(feed.book.sources)[0]
    running: list[str] = []
    while not running and time.monotonic() < deadline:
        time.sleep(0.1)  # the first fold
        table = feed.snapshot(requests_for=first).source(first).requests
        running = [r for r, f in zip(table.rids, table.in_flight, strict=True) if f]
    rid = running[0]
    feed.watch_request(first, rid)
    e0, c0, t0 = feed.book.events, _cpu(), time.perf_counter()
    fold_s.clear()
    lags.clear()
    snap_ms = []
    ticks = 0
    while time.perf_counter() - t0 < seconds:
        time.sleep(max(0.0, t0 + (ticks + 1) * interval - time.perf_counter()))
        s0 = time.perf_counter()
        snap = feed.snapshot(requests_for=first, timeline_for=(first, rid))
        snap_ms.append((time.perf_counter() - s0) * 1e3)
        ticks += 1
    dt = time.perf_counter() - t0
    cpu = _cpu() - c0
    events = feed.book.events - e0
    feed.stop()
    lag = np.array(lags) * 1e3
    return {
        "events_per_s": events / dt,
        "cpu_per_s": cpu / dt,
        "sources": len(snap.sources),
        "missed": sum(s.missed for s in snap.sources),
        "snapshot_ms_p50": float(np.median(snap_ms)),
        "snapshot_ms_max": float(max(snap_ms)),
        "snapshot_ms_p90": float(np.percentile(snap_ms, 90)),
        "fold_ms_p50": float(np.median(fold_s) * 1e3) if fold_s else 0.0,
        "fold_ms_max": float(max(fold_s) * 1e3) if fold_s else 0.0,
        "fold_share_of_core": sum(fold_s) / dt,
        "requests_tracked": len(snap.source(first).requests),
        "timeline_steps": len(snap.timeline.steps) if snap.timeline else 0,
        "lag_ms_p50": float(np.percentile(lag, 50)),
        "lag_ms_p99": float(np.percentile(lag, 99)),
    }


def measure_once(endpoints: list[str], interval: float) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "--once", "--json", "-i", str(interval), *endpoints],
        capture_output=True,
        text=True,
        timeout=60,
    )
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import eagle3_top.tui.cli"], check=True, timeout=60)
    start = time.perf_counter() - t1
    sources = len(json.loads(r.stdout)["sources"]) if r.returncode == 0 else 0
    return {"rc": r.returncode, "wall_s": wall, "interpreter_and_import_s": start, "sources": sources}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    add_load_arguments(ap, sources=8, rate=1000.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    total = 2 * args.seconds + 3 * args.interval + 25
    proc = ctx.Process(
        target=_publishers, args=(q, stop, args.sources, args.rate, args.batch, args.n, total), daemon=True
    )
    proc.start()
    endpoints = q.get(timeout=60)
    try:
        time.sleep(1.0)
        raw = measure_raw(endpoints, args.seconds)
        feed = measure_feed(endpoints, args.seconds, args.interval)
        once = measure_once(endpoints, args.interval)
    finally:
        stop.set()
        pub = q.get(timeout=60)
        proc.join(10)
    offered = args.sources * args.rate
    print(f"machine: {machine()}")
    print(f"load: {args.sources} sources x {args.rate:,.0f} step events/s (batch {args.batch} x {args.n})")
    print(f"raw SUB + unpackb : {raw['events_per_s']:,.0f} events/s, {raw['cpu_per_s']:.1%} of a core")
    print(
        f"monitor feed      : {feed['events_per_s']:,.0f} events/s ({feed['events_per_s'] / offered:.2f} of "
        f"offered), {feed['missed']} missed, {feed['cpu_per_s']:.1%} of a core "
        f"(x{feed['cpu_per_s'] / max(raw['cpu_per_s'], 1e-9):.2f} the raw SUB's)"
    )
    print(
        f"snapshot (requests + timeline copied out): p50 {feed['snapshot_ms_p50']:.2f} ms, "
        f"p90 {feed['snapshot_ms_p90']:.2f} ms, max {feed['snapshot_ms_max']:.2f} ms"
    )
    print(
        f"per-request fold (per source, 4x/s): p50 {feed['fold_ms_p50']:.1f} ms, max "
        f"{feed['fold_ms_max']:.1f} ms, {feed['fold_share_of_core']:.1%} of a core; "
        f"{feed['requests_tracked']} requests tracked on the first source, timeline {feed['timeline_steps']} steps"
    )
    print(f"lag: p50 {feed['lag_ms_p50']:.0f} ms, p99 {feed['lag_ms_p99']:.0f} ms")
    print(
        f"--once --json -i {args.interval:g}: rc {once['rc']}, {once['sources']} sources, answered in "
        f"{once['wall_s']:.2f} s (the interpreter and imports alone: {once['interpreter_and_import_s']:.2f} s)"
    )
    print(f"publisher: {pub['sent']:,} sent")


if __name__ == "__main__":
    main()


def add_load_arguments(ap: argparse.ArgumentParser, sources: int, rate: float) -> None:
    """The offered load of the benchmarks that run ``_publishers``: how many sources, each
    sending ``rate`` step events a second of ``batch`` requests by ``n`` draft tokens."""
    ap.add_argument("--sources", type=int, default=sources)
    ap.add_argument("--rate", type=float, default=rate, help="step events/s per source")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--n", type=int, default=4)
