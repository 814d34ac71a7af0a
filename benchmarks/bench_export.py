"""``eagle3-top export`` under a fleet's load: 64 sources at 100 step events/s each (batch 64 x 4),
from the publishers of ``bench_monitor_load`` (a child process, paced), while /metrics is scraped
over real HTTP.

In this process, on one exporter, one phase after the other in the same run:

1. baseline: the exporter's feed ingesting, nobody scraping;
2. scraped: the same, with a GET /metrics every ``--every`` seconds from a third process, as a
   Prometheus would (it scrapes every 15 s by default: this is many times harder).

Reported: scrape latency p50/p90/max (the bar: under 50 ms), the size of a scrape, and the ingest
rate kept while scraping against the baseline's (the ratio).

    python -m benchmarks.bench_export [--sources 64] [--rate 100] [--seconds 6] [--every 0.25]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import urllib.request
from typing import TYPE_CHECKING

import numpy as np

from .bench_monitor_load import _publishers, add_load_arguments
from .common import best_of, machine

if TYPE_CHECKING:
    from eagle3_top.tui.exporter import Exporter

BAR_MS = 50.0


def _scraper(q_out, url: str, seconds: float, every: float) -> None:
    """A Prometheus of sorts, in a process of its own: GET /metrics every ``every`` seconds."""
    lat_ms: list[float] = []
    size = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        time.sleep(max(0.0, t0 + len(lat_ms) * every - time.perf_counter()))
        s0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            size = len(r.read())
        lat_ms.append((time.perf_counter() - s0) * 1e3)
    q_out.put({"lat_ms": lat_ms, "bytes": size})


def _ingest(exp: Exporter, seconds: float, scrape: tuple | None) -> dict:
    """Events folded in over ``seconds``; ``scrape``: (context, every) to scrape meanwhile."""
    book = exp.feed.book
    proc = None
    if scrape is not None:
        ctx, every = scrape
        q = ctx.Queue()
        proc = ctx.Process(target=_scraper, args=(q, exp.url, seconds, every), daemon=True)
        proc.start()
        time.sleep(0.5)  # the interpreter's start, not counted
    e0, t0 = book.events, time.perf_counter()
    time.sleep(seconds)
    dt = time.perf_counter() - t0
    out: dict = {"events_per_s": (book.events - e0) / dt}
    if proc is not None:
        out.update(q.get(timeout=60))
        proc.join(10)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    add_load_arguments(ap, sources=64, rate=100.0)
    ap.add_argument("--seconds", type=float, default=6.0, help="per phase")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between scrapes")
    args = ap.parse_args(argv)
    from eagle3_top.tui.export_figures import ExportFeed
    from eagle3_top.tui.export_text import render
    from eagle3_top.tui.exporter import Exporter, settle_heap
    from prometheus_client.exposition import generate_latest

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    total = 2 * args.seconds + 30
    proc = ctx.Process(
        target=_publishers, args=(q, stop, args.sources, args.rate, args.batch, args.n, total), daemon=True
    )
    proc.start()
    endpoints = q.get(timeout=120)
    exp = Exporter(ExportFeed(endpoints), "127.0.0.1", 0).start()
    settle_heap()  # as the command does
    try:
        deadline = time.monotonic() + 30
        while len(exp.feed.book.sources) < len(endpoints) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # every source's steps under way
        base = _ingest(exp, args.seconds, None)
        scraped = _ingest(exp, args.seconds, (ctx, args.every))
        figures = exp.feed.figures()
    finally:
        exp.close()
        stop.set()
        pub = q.get(timeout=60)
        proc.join(10)
    # The same scrape's CPU with the load gone (the book as the run left it): ours against
    # prometheus_client's generate_latest of the very same families.
    ours = best_of(lambda: render(exp.registry.collect()), repeat=5, number=10)
    theirs = best_of(lambda: generate_latest(exp.registry), repeat=5, number=10)
    lat = np.array(scraped["lat_ms"])
    p50, p90, worst = np.percentile(lat, 50), np.percentile(lat, 90), lat.max()
    offered = args.sources * args.rate
    missed = sum(s.missed for s in figures.sources)
    print(f"machine: {machine()}")
    print(
        f"load: {args.sources} sources x {args.rate:,.0f} step events/s (batch {args.batch} x {args.n}), "
        f"{len(figures.sources)} sources exported"
    )
    print(
        f"scrape /metrics every {args.every:g} s: p50 {p50:.1f} ms, p90 {p90:.1f} ms, max {worst:.1f} ms "
        f"over {lat.size} scrapes ({scraped['bytes'] / 1024:.0f} KiB each); bar {BAR_MS:.0f} ms: "
        f"{'met' if worst < BAR_MS else 'MISSED'}"
    )
    print(
        f"ingest: {base['events_per_s']:,.0f} events/s unscraped, {scraped['events_per_s']:,.0f} scraped "
        f"(x{scraped['events_per_s'] / max(base['events_per_s'], 1e-9):.2f}; offered {offered:,.0f}), "
        f"{missed} missed"
    )
    print(
        f"a scrape's CPU, no load: {ours * 1e3:.1f} ms (collect + render) vs prometheus_client's "
        f"generate_latest {theirs * 1e3:.1f} ms: x{ours / theirs:.2f}"
    )
    print(f"publisher: {pub['sent']:,} sent")


if __name__ == "__main__":
    main()
