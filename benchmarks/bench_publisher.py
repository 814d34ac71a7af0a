"""Publisher throughput against raw pyzmq PUB, same payloads, same run.

Raw: a loop of ``msgpack.packb`` + ``PUB.send`` (what one would write by hand). Ours:
``Publisher.publish`` from the caller, the sender thread encoding and sending. Both push N step
events (batch 64 x 16) to a subscriber in another process; throughput = events the subscriber
received / seconds until the last arrived. Target: ours >= 0.8 of raw.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import msgpack
import zmq
from eagle3_top.tracer.schema import STEP, SourceId, step_body
from eagle3_top.tracer.serving.publisher import Publisher

from benchmarks.common import machine, step_arrays

N = 20_000


def _subscriber(endpoint: str, n: int, ready: mp.Event, out: mp.Queue) -> None:  # type: ignore[type-arg]
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(endpoint)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    # wait for the subscription to be live: the publisher sends probes until one arrives
    sock.recv()
    ready.set()
    got, t_first, t_last = 0, None, 0.0
    while got < n:
        if not sock.poll(2000):
            break
        frame = sock.recv()
        if len(frame) < 1000:  # subscription probes, not payload
            continue
        if t_first is None:
            t_first = time.perf_counter()
        got += 1
        t_last = time.perf_counter()
    out.put((got, t_last))


def _connect(send_probe, endpoint: str, n: int) -> tuple[mp.Process, mp.Queue]:  # type: ignore[no-untyped-def,type-arg]
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_subscriber, args=(endpoint, n, ready, out), daemon=True)
    proc.start()
    while not ready.is_set():
        send_probe()
        time.sleep(0.05)
    time.sleep(0.1)
    return proc, out


def run_raw(bodies: list[dict]) -> float:
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    proc, out = _connect(lambda: sock.send(b"probe"), ep, len(bodies))
    t0 = time.perf_counter()
    for i, body in enumerate(bodies):
        sock.send(msgpack.packb({"v": 1, "kind": STEP, "src": "h:1:r0", "seq": i, "ts": time.time(), **body}))
    got, t_last = out.get(timeout=60)
    proc.join()
    sock.close()
    return got / (t_last - t0)


def run_ours(bodies: list[dict]) -> float:
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(), queue_size=len(bodies) + 16, sndhwm=0)
    proc, out = _connect(lambda: pub.publish("probe", {}), pub.bound_endpoint, len(bodies))
    t0 = time.perf_counter()
    for body in bodies:
        pub.publish(STEP, body)
    got, t_last = out.get(timeout=60)
    proc.join()
    pub.close()
    return got / (t_last - t0)


def main() -> dict[str, float]:
    s = step_arrays()
    bodies = [
        step_body(step=i, rids=s.rids, draft=s.draft, accept_lens=s.accepted + 1, tokens=s.tokens)
        for i in range(N)
    ]
    print(f"# bench_publisher: {N} step events (batch 64 x 16) to a subscriber process, on {machine()}")
    raw = max(run_raw(bodies) for _ in range(2))
    ours = max(run_ours(bodies) for _ in range(2))
    print(f"  raw pyzmq PUB        {raw:12,.0f} events/s")
    print(f"  eagle3-top Publisher {ours:12,.0f} events/s")
    print(f"  ours / raw: {ours / raw:.3f}  (target >= 0.8)")
    return {"raw_events_per_s": raw, "ours_events_per_s": ours, "ratio": ours / raw}


if __name__ == "__main__":
    main()
