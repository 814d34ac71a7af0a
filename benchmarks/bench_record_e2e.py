"""``eagle3-top record`` end to end: a real Publisher on loopback, the real command in a child.

The benchmark process publishes step events of batch 64 x 4 through ``Publisher`` (its sender
thread encodes them), paced at ``--rate`` events/s, then as fast as it can, never past its own
queue (a flood past what the recorder takes ends as frames its socket refuses). A child process
receives them for ``--seconds``: ``eagle3-top record`` (its stop line gives the frames and the
missed ones; the rate comes from the file's first and last receive times), and, as the baseline in
the same run, a raw pyzmq SUB loop that only receives (same high-water mark, same poll-and-drain
loop). With two or more CPUs, the child is pinned to one and the publisher to another: the
recorder gets one core, its ZeroMQ I/O thread included. Rounds alternate; medians printed.

    python -m benchmarks.bench_record_e2e [--rate 50000] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from eagle3_top.tracer.schema import STEP, SourceId
from eagle3_top.tracer.serving.publisher import Publisher

from benchmarks.bench_record import step_bodies
from benchmarks.common import machine

RCVHWM = 100_000  # the Subscriber's default: the baseline queues as much as the recorder does
STOP = re.compile(r"(\d+) frames, (\d+) bytes, (\d+) missed")
Pool = list[dict[str, object]]


def bodies(n: int = 1024) -> Pool:
    return list(step_bodies(n))


def raw_sub(endpoint: str, seconds: float) -> None:
    """The baseline, run in the child: receive and count, nothing else."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, RCVHWM)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    n, first, last = 0, 0, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not sock.poll(50):
            continue
        now = time.time_ns()
        got = 0
        try:
            while got < 4096:  # as Subscriber.recv_frames
                sock.recv(zmq.NOBLOCK)
                got += 1
        except zmq.Again:
            pass
        n += got
        first, last = first or now, now
    print(n, first, last)


def _pin(cpu: int | None) -> Callable[[], None] | None:
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def run_child(
    pub: Publisher, argv: list[str], rate: float, seconds: float, pool: Pool, cpu: int | None
) -> subprocess.CompletedProcess[str]:
    """Publish until the child exits."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_pin(cpu)
    )
    sent0, dropped0 = pub.sent, pub.dropped
    published = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + seconds + 30
    while proc.poll() is None and time.monotonic() < deadline:
        due = int((time.perf_counter() - t0) * rate) if rate else published + 256
        # never past the tracer's queue: a drop there would be the publisher's, not the recorder's
        room = pub.queue_size // 2 - (published - (pub.sent - sent0) - (pub.dropped - dropped0))
        k = min(due - published, room, 256)
        for _ in range(max(0, k)):
            pub.publish(STEP, pool[published % len(pool)])
            published += 1
        if k <= 0:
            time.sleep(0.0002)
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def raw_round(
    pub: Publisher, ep: str, ns: argparse.Namespace, rate: float, pool: Pool, cpu: int | None
) -> float:
    """Events/s the baseline received."""
    child = [sys.executable, "-m", "benchmarks.bench_record_e2e", "--raw-sub", ep, str(ns.seconds)]
    done = run_child(pub, child, rate, ns.seconds, pool, cpu)
    n, first, last = map(int, done.stdout.split())
    return (n - 1) / ((last - first) / 1e9)


def record_round(
    pub: Publisher, ep: str, ns: argparse.Namespace, rate: float, pool: Pool, cpu: int | None, path: str
) -> tuple[float, int, float, float]:
    """Events/s recorded, frames missed (the stop line's), bytes per event on disk, and the child's
    CPU per frame written in us (start-up included: compare rounds of the same length). Past the
    recorder's ceiling the rate is its CPU's share over this cost: a cost that grows with overload
    (a deep queue read back out of cache) is a rate that falls with it."""
    cmd = [sys.executable, "-m", "eagle3_top.tui.cli", "record", ep, "-o", path, "--force"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = run_child(pub, [*cmd, "--duration", str(ns.seconds)], rate, ns.seconds, pool, cpu)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = STOP.search(done.stderr)
    assert done.returncode == 0 and m, done.stderr
    frames, missed = int(m.group(1)), int(m.group(3))
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = frames / span_s(path), missed, os.path.getsize(path) / frames, cpu_s / frames * 1e6
    os.unlink(path)
    return result


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=50_000, help="events/s; 0: as fast as the publisher can")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--raw-sub", nargs=2, metavar=("ENDPOINT", "SECONDS"), help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.raw_sub:
        raw_sub(ns.raw_sub[0], float(ns.raw_sub[1]))
        return {}
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1] if len(cpus) > 1 else None
    if cpu is not None:
        os.sched_setaffinity(0, set(cpus[:-1]))  # before the publisher: its threads inherit it
    where = f"child pinned to CPU {cpu}, publisher to {cpus[:-1]}" if cpu is not None else "unpinned"
    print(
        f"# bench_record_e2e: Publisher -> loopback -> child, step events of batch 64 x 4, {ns.seconds:g} s "
        f"per run, medians of {ns.rounds} rounds, on {machine()}; {where}"
    )
    try:
        return publish_and_record(ns, cpu)
    finally:
        os.sched_setaffinity(0, set(cpus))  # run_all goes on with other benchmarks


def publish_and_record(ns: argparse.Namespace, cpu: int | None) -> dict[str, float]:
    pool = bodies()
    pub = Publisher("tcp://127.0.0.1:0", SourceId("bench-host", 4242, 0, "bench"))
    ep = pub.bound_endpoint
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        for rate in [ns.rate] + ([0.0] if ns.rate else []):
            dropped0 = pub.dropped
            raws, recs = [], []
            for _ in range(ns.rounds):
                raws.append(raw_round(pub, ep, ns, rate, pool, cpu))
                recs.append(record_round(pub, ep, ns, rate, pool, cpu, os.path.join(d, "e2e.mcap")))
            raw = statistics.median(raws)
            rec = statistics.median(r[0] for r in recs)
            missed = [r[1] for r in recs]
            label = f"paced at {rate:,.0f}/s" if rate else "as fast as the publisher can"
            # flooding, a full pipe to the recorder makes the publisher's socket refuse frames: they
            # are counted as the tracer's drops and, being numbered, as the recorder's missed ones
            print(f"  {label} (refused at the publisher: {pub.dropped - dropped0:,} events):")
            print(f"    raw pyzmq SUB, receive only  {raw:9,.0f} events/s (baseline)")
            print(
                f"    eagle3-top record            {rec:9,.0f} events/s (ratio {rec / raw:.2f}), "
                f"missed per run {missed}; {statistics.median(r[2] for r in recs):,.0f} B per event on disk; "
                f"CPU {statistics.median(r[3] for r in recs):.1f} us per frame written"
            )
            key = "paced" if rate else "flood"
            results.update({f"{key}_raw": raw, f"{key}_record": rec, f"{key}_missed": max(missed)})
    pub.close()
    return results


def span_s(path: str) -> float:
    """Seconds between the first and the last receive time in a complete recording."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None and summary.statistics is not None
    st = summary.statistics
    return (st.message_end_time - st.message_start_time) / 1e9


if __name__ == "__main__":
    main()
