"""``eagle3-top relay`` against a direct PUB/SUB link, same frames, same run.

The benchmark process sends real step frames (batch 64 x 4, as a busy SGLang server's tracer
encodes them, ``bench_record.step_bodies``) from a raw pyzmq PUB, paced at ``--rate`` frames/s
(0: as fast as it can). A subscriber process receives them, either straight from the PUB (the
baseline) or through the real command, ``eagle3-top relay``, in a process of its own, and with
``--record`` on. Rate = frames the subscriber received / seconds from the first send to the last
arrival. Everything shares the machine's cores. Rounds alternate the three; medians printed.

    python -m benchmarks.bench_relay [--rate 0] [--frames 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import zmq
from eagle3_top.tracer.schema import STEP, encode

from benchmarks.bench_record import step_bodies
from benchmarks.common import machine

# No frame dropped on either link: a flood measures what each carries, not what it throws away.
# The relay's recorder still misses what it cannot keep up with (counted, by design).
SNDHWM = 0
RELAY_BUFFER = "10000000"
PROBE = b"probe"  # shorter than any frame: the subscriber's sign that the path is live
RELAYING = re.compile(r"relaying .* to (tcp://\S+)")
RECORDED = re.compile(r"recorded ([\d,]+) frames to .*; ([\d,]+) not recorded")


def frames(n: int, pool: int = 2048) -> list[bytes]:
    bodies = list(step_bodies(pool))
    return [encode(STEP, "gpu-box:4242:r0", i, 1.78e9 + i / 1000, bodies[i % pool]) for i in range(n)]


def _subscriber(endpoint: str, n: int, ready: mp.Event, out: mp.Queue) -> None:  # type: ignore[type-arg]
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 100_000)  # as the Subscriber's
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    sock.recv()  # a probe: the path is live (later probes are skipped below)
    ready.set()
    got, t_last = 0, 0.0
    while got < n and sock.poll(2000):
        try:
            while True:
                if len(sock.recv(zmq.NOBLOCK)) > len(PROBE):
                    got += 1
        except zmq.Again:
            t_last = time.perf_counter()
    out.put((got, t_last))


def _send(sock: zmq.Socket, payload: list[bytes], rate: float) -> float:
    """Send every frame, paced at ``rate`` (0: flood); the start time."""
    t0 = time.perf_counter()
    if not rate:
        for f in payload:
            sock.send(f)
        return t0
    sent = 0
    while sent < len(payload):
        due = min(len(payload), int((time.perf_counter() - t0) * rate) + 1)
        for f in payload[sent:due]:
            sock.send(f)
        sent = due
        time.sleep(0.0005)
    return t0


def _through(endpoint: str, payload: list[bytes], rate: float, send: zmq.Socket) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_subscriber, args=(endpoint, len(payload), ready, out), daemon=True)
    proc.start()
    while not ready.is_set():
        send.send(PROBE)
        time.sleep(0.05)
    time.sleep(0.2)  # the last probes drained
    t0 = _send(send, payload, rate)
    got, t_last = out.get(timeout=120)
    proc.join()
    return got / (t_last - t0), got


def run(payload: list[bytes], rate: float, relay: list[str] | None) -> tuple[float, int, str]:
    """(frames/s received, frames received, the relay's recording line or "")."""
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, SNDHWM)
    sock.bind("tcp://127.0.0.1:0")
    upstream = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    if relay is None:
        try:
            return (*_through(upstream, payload, rate, sock), "")
        finally:
            sock.close(0)
    argv = [sys.executable, "-m", "eagle3_top.tui.cli", "relay", "--bind", "tcp://127.0.0.1:0", "--quiet"]
    argv += ["--subscriber-buffer", RELAY_BUFFER]
    proc = subprocess.Popen(
        [*argv, *relay, "--connect", upstream], stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stderr is not None
        m = RELAYING.search(proc.stderr.readline())
        assert m is not None, "the relay did not start"
        rate_got, got = _through(m.group(1), payload, rate, sock)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        rec = RECORDED.search(err)
        return rate_got, got, rec.group(0) if rec else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close(0)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=0.0, help="frames/s the sender paces at (0: flood)")
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args(argv)
    payload = frames(ns.frames)
    size = sum(map(len, payload)) / len(payload)
    pace = f"paced at {ns.rate:,.0f}/s" if ns.rate else "flooding"
    print(f"# bench_relay: {ns.frames:,} step frames (batch 64 x 4, {size:,.0f} B), {pace}, on {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        record = ["--record", os.path.join(tmp, "relay.mcap"), "--force"]
        ways: dict[str, Callable[[], tuple[float, int, str]]] = {
            "direct": lambda: run(payload, ns.rate, None),
            "relay": lambda: run(payload, ns.rate, []),
            "relay --record": lambda: run(payload, ns.rate, record),
        }
        rates: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(ns.rounds):
            for name, way in ways.items():
                r, got, rec = way()
                rates[name].append(r)
                lost = f", {ns.frames - got:,} lost" if got < ns.frames else ""
                print(f"  {name:15s} {r:10,.0f} frames/s{lost}{'; ' + rec if rec else ''}")
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"  relay / direct: {med['relay'] / med['direct']:.2f}  (medians; target >= 0.8)")
    print(f"  relay --record / direct: {med['relay --record'] / med['direct']:.2f}")
    return {
        "direct_frames_per_s": med["direct"],
        "relay_frames_per_s": med["relay"],
        "record_frames_per_s": med["relay --record"],
        "ratio": med["relay"] / med["direct"],
        "ratio_record": med["relay --record"] / med["direct"],
    }


if __name__ == "__main__":
    main()
