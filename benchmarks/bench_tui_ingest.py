"""How fast the TUI's receive path ingests step events (batch 64 x 16 draft tokens).

A child process (spawn) runs a real ``Publisher`` and publishes step events as fast as it can.
In this process we measure, one after the other in the same run:

1. raw: a bare pyzmq SUB socket, ``recv`` + ``msgpack.unpackb`` (the floor for any Python
   subscriber);
2. tui: the TUI's real path — ``Feed`` thread (``Subscriber.recv_frames`` → ``decode_frame`` →
   ``EvidenceBook.ingest`` = the schema's step checks + ``AcceptanceStats.add_many``) while the main thread pulls a
   ``Snapshot`` at 4 Hz like the UI does.

It reports events/s for both, their ratio, events missed (sequence holes), and the receive lag
(receiver wall clock minus the publisher's event timestamp, same host).

    python -m benchmarks.bench_tui_ingest [--seconds 5] [--batch 64] [--n 16] [--rate 10000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import msgpack
import numpy as np
import zmq


def _publisher(q_out, stop, batch: int, n: int, seconds: float, rate: float = 0.0) -> None:
    from eagle3_top.tracer.schema import STEP, SourceId, step_body
    from eagle3_top.tracer.serving.publisher import Publisher

    rng = np.random.default_rng(0)
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(engine="toy"), queue_size=8192, sndhwm=100_000)
    q_out.put(pub.bound_endpoint)
    bodies = []
    for i in range(16):
        acc = rng.integers(0, n, batch).astype(np.int32)
        draft = rng.integers(1, 128_000, (batch, n)).astype(np.int32)
        tokens = rng.integers(1, 128_000, int(acc.sum()) + batch).astype(np.int32)
        bodies.append(
            step_body(
                step=i,
                rids=[f"req-{j:06d}" for j in range(batch)],
                draft=draft,
                accept_lens=acc + 1,
                tokens=tokens,
                dt=0.01,
            )
        )
    t_start = time.monotonic()
    deadline = t_start + seconds
    i = 0
    while not stop.is_set() and time.monotonic() < deadline:
        if rate and i % 64 == 0:
            ahead = t_start + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        if not pub.publish(STEP, bodies[i & 15]):
            time.sleep(0.0002)  # queue full: let the sender thread run
        i += 1
    pub.close()
    q_out.put({"published_attempts": i, "sent": pub.sent, "dropped": pub.dropped})


def _wait_first(sock: zmq.Socket, timeout_s: float = 10.0) -> None:
    if not sock.poll(int(timeout_s * 1000)):
        raise SystemExit("no frames from the publisher")


def measure_raw(endpoint: str, seconds: float) -> dict:
    ctx: zmq.Context = zmq.Context.instance()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    _wait_first(sock)
    n = 0
    lags = []
    seqs_first = seqs_last = None
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        if not sock.poll(100):
            if time.perf_counter() > end:
                break
            continue
        msg = msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
        n += 1
        if seqs_first is None:
            seqs_first = msg["seq"]
        seqs_last = msg["seq"]
        if n % 256 == 0:
            lags.append(time.time() - msg["ts"])
            if time.perf_counter() > end:
                break
    dt = time.perf_counter() - t0
    sock.close(0)
    span = (seqs_last - seqs_first + 1) if seqs_first is not None else 0
    return {"events": n, "seconds": dt, "rate": n / dt, "missed": max(0, span - n), "lags": lags}


def measure_tui(endpoint: str, seconds: float) -> dict:
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tui.feed import Feed

    lags: list[float] = []

    class LagBook(EvidenceBook):
        def ingest(self, events, now, on_malformed=None):
            if events:
                lags.append(time.time() - events[-1].ts)
            return super().ingest(events, now, on_malformed)

    feed = Feed([endpoint], book=LagBook()).start()
    # wait for the first events
    t_wait = time.monotonic() + 10
    while feed.book.events == 0 and time.monotonic() < t_wait:
        time.sleep(0.005)
    e0 = feed.book.events
    t0 = time.perf_counter()
    snaps = 0
    snap_ms = []
    while time.perf_counter() - t0 < seconds:
        time.sleep(0.25)
        s0 = time.perf_counter()
        snap = feed.snapshot()
        snap_ms.append((time.perf_counter() - s0) * 1e3)
        snaps += 1
    e1 = feed.book.events
    dt = time.perf_counter() - t0
    src = snap.sources[0] if snap.sources else None
    feed.stop()
    return {
        "events": e1 - e0,
        "seconds": dt,
        "rate": (e1 - e0) / dt,
        "missed": src.missed if src else None,
        "malformed": snap.malformed,
        "lags": lags,
        "snapshot_ms_max": max(snap_ms) if snap_ms else None,
        "mean_accept_length": src.summary.mean_accept_length if src else None,
    }


def _lag_stats(lags: list[float]) -> dict:
    if not lags:
        return {}
    a = np.array(lags) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
    }


def run_one(kind: str, seconds: float, batch: int, n: int, rate: float = 0.0) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    proc = ctx.Process(target=_publisher, args=(q, stop, batch, n, seconds + 3.0, rate), daemon=True)
    proc.start()
    endpoint = q.get(timeout=30)
    try:
        res = measure_raw(endpoint, seconds) if kind == "raw" else measure_tui(endpoint, seconds)
    finally:
        stop.set()
        pub_stats = q.get(timeout=30)
        proc.join(10)
    res["publisher"] = pub_stats
    res["lag"] = _lag_stats(res.pop("lags"))
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--rate", type=float, default=0.0, help="pace the publisher (events/s); 0 = flood")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    raw = run_one("raw", args.seconds, args.batch, args.n, args.rate)
    tui = run_one("tui", args.seconds, args.batch, args.n, args.rate)
    out = {
        "batch": args.batch,
        "n": args.n,
        "rate": args.rate,
        "raw": raw,
        "tui": tui,
        "ratio_tui_over_raw": tui["rate"] / raw["rate"],
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for name, r in (("raw pyzmq+msgpack", raw), ("tui Feed+EvidenceBook", tui)):
        pub = r["publisher"]
        pub_rate = pub["sent"] / (args.seconds + 3.0)
        print(
            f"{name:24s} {r['rate']:>10,.0f} ev/s  missed {r['missed']}  lag {r['lag']}  "
            f"(publisher sent {pub['sent']:,}, ~{pub_rate:,.0f}/s avg, dropped {pub['dropped']:,})"
        )
    print(f"snapshot max {tui['snapshot_ms_max']:.2f} ms, mean accept length {tui['mean_accept_length']:.3f}")
    print(f"ratio tui/raw = {out['ratio_tui_over_raw']:.2f}")


if __name__ == "__main__":
    main()
