"""``eagle3-top export`` under a fleet's load, against a bare SUB of the same stream, at 16 and 64
sources; and the exporter before it left tui/ (its own feed), on the same stream in the same run.

A child process (spawn, niced: the servers stand for other machines) runs 64 real ``Publisher``s,
paced at ``--rate`` step events/s each (batch 64 x 4, ``bench_monitor_load``'s). Each subject is a
process of its own subscribed to the first N of them, its CPU read from /proc:

- ``sub``: a bare pyzmq SUB, ``recv`` + ``msgpack.unpackb`` of every frame (the floor);
- ``new``: the command as a user runs it, ``eagle3-top export --prometheus 0 ENDPOINT ...``;
- ``old``: the same command from the last commit that had ``tui/exporter.py`` (unpacked from git
  under /tmp and put first on PYTHONPATH: a path entry wins over the editable install's finder).

Per subject and N: once it has heard every source, CPU over ``--seconds`` unscraped, then over
``--seconds`` with a GET /metrics every ``--every`` seconds from this process (scrape latency).
Rounds alternate the order of the subjects and of the sizes; medians over ``--rounds`` are shown.
Then a scrape's own CPU with no load (collect + render, in this process) at 16 and 64 sources.

Goals: CPU at most 2x the bare SUB's; scrape p50 under 20 ms at 64 sources; cost linear in
sources (per source, 64 costs at most 1.25x what 16 do: CPU, scrape p50, a scrape's own CPU).

    python -m benchmarks.bench_export [--sizes 16,64] [--rate 100] [--seconds 5] [--every 0.25]
                                      [--rounds 3] [--old REV | --no-old]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections import defaultdict
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from .bench_monitor_load import _publishers, add_load_arguments
from .common import best_of, cpu_s, machine, rss_mb

ROOT = Path(__file__).resolve().parent.parent
CPU_RATIO_GOAL = 2.0
SCRAPE_P50_GOAL_MS = 20.0
LINEAR_SLACK = 1.25  # per-source cost at 64 over that at 16
SAMPLE = re.compile(r"^(eagle3_[a-z_]+)\{([^}]*)\} (\S+)$", re.M)


# -- the subjects ------------------------------------------------------------------------------------


def bare_sub(endpoints: list[str]) -> None:
    """The floor, as a process of its own: receive and unpack every frame (SIGTERM: print the
    count and stop)."""
    import msgpack
    import zmq

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    sock: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    for ep in endpoints:
        sock.connect(ep)
    n = 0
    while not stop:
        if sock.poll(100):
            msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
            n += 1
            if n == 1:
                print("ready", flush=True)
    print(n, flush=True)


class Subject:
    """One subject's process; ``url`` is its /metrics (None for the bare SUB)."""

    def __init__(self, kind: str, endpoints: list[str], shim: Path | None) -> None:
        self.kind = kind
        env = dict(os.environ)
        if kind == "sub":
            cmd = [sys.executable, "-m", "benchmarks.bench_export", "--bare-sub", *endpoints]
            cwd = ROOT
        else:
            cmd = [sys.executable, "-m", "eagle3_top.tui.cli", "export", "--prometheus", "0", *endpoints]
            cwd = Path("/tmp")  # nothing of the checkout on sys.path but what the install maps
            if kind == "old":
                assert shim is not None
                env["PYTHONPATH"] = str(shim)
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.url: str | None = None
        self.lines: list[str] = []
        stream = self.proc.stdout if kind == "sub" else self.proc.stderr
        assert stream is not None
        want = "ready" if kind == "sub" else "serving "
        while True:
            line = stream.readline()
            if not line:
                raise RuntimeError(f"{kind} ended: {self.proc.stderr.read() if self.proc.stderr else ''}")
            if line.startswith(want) or want in line:
                break
        if kind != "sub":
            m = re.search(r"serving (http://\S+/metrics)", line)
            assert m, line
            self.url = m.group(1)
        # keep reading what it says, so that no pipe fills
        threading.Thread(target=lambda: self.lines.extend(stream), daemon=True).start()

    def cpu(self) -> float:
        return cpu_s(self.proc.pid)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def scrape(url: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        text = r.read().decode()
    return (time.perf_counter() - t0) * 1e3, text


def samples(text: str, name: str) -> list[float]:
    return [float(v) for n, _, v in SAMPLE.findall(text) if n == name]


def measure(kind: str, endpoints: list[str], shim: Path | None, seconds: float, every: float) -> dict:
    s = Subject(kind, endpoints, shim)
    try:
        if s.url is not None:  # every source heard and stepping
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                steps = samples(scrape(s.url)[1], "eagle3_verify_steps_total")
                if len(steps) == len(endpoints) and min(steps) > 0:
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError(f"{kind}: not every source heard in 60 s")
        time.sleep(1.0)
        steps0 = sum(samples(scrape(s.url)[1], "eagle3_verify_steps_total")) if s.url else 0.0
        rss0 = rss_mb(s.proc.pid)
        c0, t0 = s.cpu(), time.perf_counter()
        time.sleep(seconds)
        cpu, dt = s.cpu() - c0, time.perf_counter() - t0
        out: dict[str, Any] = {"cpu": cpu / dt}
        if s.url is None:
            return out
        steps1 = sum(samples(scrape(s.url)[1], "eagle3_verify_steps_total"))
        out["folded_per_s"] = (steps1 - steps0) / dt
        lat: list[float] = []
        c0, t0 = s.cpu(), time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            time.sleep(max(0.0, t0 + len(lat) * every - time.perf_counter()))
            ms, text = scrape(s.url)
            lat.append(ms)
        out["cpu_scraped"] = (s.cpu() - c0) / (time.perf_counter() - t0)
        out["lat"] = lat
        out["bytes"] = len(text)
        out["missed"] = sum(samples(text, "eagle3_missed_events_total"))
        # past what the fold takes (--rate 500 at 64 sources on two cores): dropped at the bounded
        # receive queue and counted, memory flat
        out["dropped"] = sum(samples(text, "eagle3_receive_dropped_events_total"))
        out["rss_mb"] = (rss0, rss_mb(s.proc.pid))
        lag = samples(text, "eagle3_fold_lag_seconds")
        out["lag_ms"] = float(np.max(lag)) * 1e3 if lag else None
        return out
    finally:
        s.close()


# -- the old code ------------------------------------------------------------------------------------


def old_shim(rev: str | None) -> tuple[Path | None, str]:
    """A PYTHONPATH entry holding eagle3_top as of ``rev`` (default: the last commit that had
    tui/exporter.py), unpacked from git under /tmp; None and why when there is none."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    try:
        if rev is None:  # HEAD while it has the old exporter, else the parent of the commit that moved it
            rev = "HEAD"
            if not git("ls-tree", "--name-only", "HEAD", "tui/exporter.py").strip():
                moved = git("rev-list", "-1", "HEAD", "--", "tui/exporter.py").strip()
                if not moved:
                    return None, "no commit has tui/exporter.py"
                rev = f"{moved}^"
        sha = git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
        shim = Path(f"/tmp/eagle3-top-bench-old-{sha[:12]}")
        pkg = shim / "eagle3_top"
        if not (pkg / "tui" / "exporter.py").exists():
            tar = subprocess.run(
                ["git", "archive", sha, "tracer", "tui", "hooks"], cwd=ROOT, capture_output=True, check=True
            ).stdout
            pkg.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=BytesIO(tar)) as t:
                t.extractall(pkg, filter="data")
            (pkg / "__init__.py").write_text("")
        if not (pkg / "tui" / "exporter.py").exists():
            return None, f"{sha[:12]} has no tui/exporter.py"
        return shim, sha[:12]
    except (subprocess.CalledProcessError, OSError) as exc:
        return None, f"cannot unpack the old code: {exc}"


# -- a scrape's own CPU, no load ---------------------------------------------------------------------


def scrape_cpu_ms(sources: int, batch: int, n: int) -> float:
    """collect + render of the exporter's collector over a book of ``sources`` sources (a hello, a
    health and 50 steps each, their findings judged), in this process with nothing else running."""
    from eagle3_top.tracer.analysis.diagnosis import Diagnoser
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.export.collector import EvidenceCollector
    from eagle3_top.tracer.export.figures import copy_figures
    from eagle3_top.tracer.export.lag import FoldLag
    from eagle3_top.tracer.reader.ledger import FrameLedger
    from eagle3_top.tracer.schema import HEALTH, HELLO, STEP, Hello, encode

    from .bench_monitor_load import _bodies

    book, ledger, lag, now = EvidenceBook(track_requests=False), FrameLedger(), FoldLag(), time.time()
    frames = []
    for s in range(sources):
        key = f"bench:{1000 + s}:r0"
        frames.append(encode(HELLO, key, 0, now, Hello(engine="bench").to_body()))
        frames.append(encode(HEALTH, key, 1, now, {"dropped": 0, "hook_errors": 0, "started": 1.0}))
        frames += [encode(STEP, key, 2 + i, now, b) for i, b in enumerate(_bodies(batch, n, s, 50))]
    book.ingest([e for e in map(ledger.decode_frame, frames) if e is not None], now)
    lag.fold({key: now for key in book.sources}, now)
    diagnoses, _ = Diagnoser().run(book, now)
    collector = EvidenceCollector(lambda: copy_figures(book, diagnoses, ledger, lag, time.time()))
    return best_of(collector.render, repeat=5, number=10) * 1e3


# -- the run -----------------------------------------------------------------------------------------


def _remote_publishers(*args: Any) -> None:
    os.nice(10)  # they stand for servers on other machines: the subject keeps its share of the cores
    _publishers(*args)


def _med(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    add_load_arguments(ap, sources=64, rate=100.0)
    ap.add_argument("--sizes", default="16,64", help="sources each subject subscribes to")
    ap.add_argument("--seconds", type=float, default=5.0, help="per phase (unscraped, scraped)")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between scrapes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old", metavar="REV", help="the old exporter's commit (default: the last with tui/)")
    ap.add_argument("--no-old", action="store_true", help="skip the old exporter")
    ap.add_argument("--bare-sub", nargs="+", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bare_sub:
        bare_sub(args.bare_sub)
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    shim, old_note = (None, "skipped (--no-old)") if args.no_old else old_shim(args.old)
    kinds = ["sub", "new"] + (["old"] if shim is not None else [])
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    per_run = 2 * args.seconds + 8
    total = args.rounds * len(sizes) * len(kinds) * per_run + 120
    pub = ctx.Process(
        target=_remote_publishers,
        args=(q, stop, max(sizes), args.rate, args.batch, args.n, total),
        daemon=True,
    )
    pub.start()
    endpoints = q.get(timeout=120)
    res: dict[tuple[str, int], list[dict]] = defaultdict(list)
    try:
        time.sleep(1.0)
        for r in range(args.rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for size in sizes if r % 2 == 0 else sizes[::-1]:
                for kind in order:
                    m = measure(kind, endpoints[:size], shim, args.seconds, args.every)
                    res[(kind, size)].append(m)
                    print(f"  round {r + 1} {kind:>3} x{size}: {m['cpu']:.1%} of a core", file=sys.stderr)
    finally:
        stop.set()
        sent = q.get(timeout=60)
        pub.join(10)
    own = {size: scrape_cpu_ms(size, args.batch, args.n) for size in sizes}
    _report(args, sizes, kinds, res, own, old_note, sent)


def _report(
    args: argparse.Namespace,
    sizes: list[int],
    kinds: list[str],
    res: dict[tuple[str, int], list[dict]],
    own: dict[int, float],
    old_note: str,
    sent: dict,
) -> None:
    names = {
        "sub": "bare SUB + unpackb",
        "new": "export (tracer/export)",
        "old": f"export before ({old_note})",
    }
    print(f"machine: {machine()}")
    print(
        f"load: {max(sizes)} publishers x {args.rate:,.0f} step events/s (batch {args.batch} x {args.n}); "
        f"each subject subscribes to the first N; medians of {args.rounds} rounds, "
        f"{args.seconds:g} s per phase; /metrics every {args.every:g} s in the scraped phase"
    )
    if "old" not in kinds:
        print(f"old exporter: {old_note}")
    fig: dict[tuple[str, int], dict[str, float]] = {}
    for size in sizes:
        sub = _med([m["cpu"] for m in res[("sub", size)]])
        print(f"-- {size} sources ({size * args.rate:,.0f} events/s offered)")
        print(f"  {names['sub']:<40} CPU {sub:6.1%} of a core")
        for kind in kinds[1:]:
            ms = res[(kind, size)]
            lat = [x for m in ms for x in m["lat"]]
            cpu, cpu_s_ = _med([m["cpu"] for m in ms]), _med([m["cpu_scraped"] for m in ms])
            p50s = [float(np.percentile(m["lat"], 50)) for m in ms]
            f = fig[(kind, size)] = {"cpu": cpu, "ratio": cpu / sub, "p50": _med(p50s)}
            lags = [m["lag_ms"] for m in ms if m["lag_ms"] is not None]
            print(
                f"  {names[kind]:<40} CPU {cpu:6.1%} of a core (x{f['ratio']:.2f} the SUB's; rounds "
                f"{', '.join(f'x{c / sub:.2f}' for c in (m['cpu'] for m in ms))}), scraped {cpu_s_:.1%}; folded "
                f"{_med([m['folded_per_s'] for m in ms]):,.0f} events/s, missed "
                f"{max(m['missed'] for m in ms):,.0f} (dropped on the way {max(m['dropped'] for m in ms):,.0f})"
                + (f", fold lag max {_med(lags):.0f} ms" if lags else "")
                + "; RSS "
                + ", ".join(f"{a:.0f} -> {b:.0f} MB" for a, b in (m["rss_mb"] for m in ms))
            )
            print(
                f"  {'':<40} scrape p50 {f['p50']:.1f} ms (rounds {', '.join(f'{p:.1f}' for p in p50s)}), "
                f"p90 {np.percentile(lat, 90):.1f} ms, max {max(lat):.1f} ms over {len(lat)} scrapes "
                f"({ms[0]['bytes'] / 1024:.0f} KiB)"
            )
    lo, hi = min(sizes), max(sizes)
    k = hi / lo
    print(
        "-- a scrape's own CPU, no load (collect + render): "
        + ", ".join(f"{own[s]:.2f} ms at {s}" for s in sizes)
    )
    for kind in kinds[1:]:
        a, b = fig[(kind, lo)], fig[(kind, hi)]
        growth = {"CPU": b["cpu"] / a["cpu"], "scrape p50": b["p50"] / a["p50"]}
        if kind == "new":
            growth["scrape CPU"] = own[hi] / own[lo]
        linear = all(g <= k * LINEAR_SLACK for g in growth.values())
        print(
            f"{kind}: {hi} sources over {lo} (x{k:g} the events): "
            + ", ".join(f"{n} x{g:.2f}" for n, g in growth.items())
            + f" -> {'linear' if linear else 'NOT linear'} in sources (bar x{k * LINEAR_SLACK:g})"
        )
    new = fig[("new", hi)]
    print(
        f"goals at {hi} sources: CPU x{new['ratio']:.2f} the bare SUB's (<= x{CPU_RATIO_GOAL:g}: "
        f"{'met' if new['ratio'] <= CPU_RATIO_GOAL else 'MISSED'}); scrape p50 {new['p50']:.1f} ms "
        f"(< {SCRAPE_P50_GOAL_MS:g} ms: {'met' if new['p50'] < SCRAPE_P50_GOAL_MS else 'MISSED'})"
    )
    if "old" in kinds:
        old = fig[("old", hi)]
        print(
            f"before, at {hi} sources: CPU x{old['ratio']:.2f} the bare SUB's, scrape p50 {old['p50']:.1f} ms; "
            f"now x{new['ratio']:.2f}, {new['p50']:.1f} ms"
        )
    print(f"publisher: {sent['sent']:,} sent")


if __name__ == "__main__":
    main()
