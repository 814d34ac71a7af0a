"""Tracer overhead on the built-in engine: traced / untraced verify steps per second, same run.

One engine, batch 8; the tracer (verify wrapper + fc pre-hook, publisher thread, a subscriber
process draining the stream) is attached for every other short round and detached in between, so
both sides run the same objects on the same workload and machine noise hits both alike (two engine
instances differ by several percent on their own). Each pair of rounds gives a ratio; the median
pair is reported, and the sum over all rounds. Target: >= 0.97.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

from benchmarks.common import drain_subscriber, machine


def run(batch: int = 8, rounds: int = 40, steps_per_round: int = 40) -> dict[str, float]:
    from eagle3_top.hooks.toy.engine import ToyEagle3Engine
    from eagle3_top.hooks.toy_tracing import attach_toy
    from eagle3_top.tracer.schema import SourceId
    from eagle3_top.tracer.serving.publisher import Publisher
    from eagle3_top.tracer.serving.tracer import Tracer

    engine = ToyEagle3Engine(batch_size=batch, seed=1)
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(engine="toy"))
    tracer = Tracer(pub)
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    sub = ctx.Process(target=drain_subscriber, args=(pub.bound_endpoint, stop, out), daemon=True)
    sub.start()
    time.sleep(1.0)
    engine.run(max_steps=20)  # warm-up: first batch prefill, allocator
    t_plain = t_traced = 0.0
    n_plain = n_traced = 0
    pair_ratios = []
    for r in range(rounds):
        times = {}
        for traced in (r % 2 == 0, r % 2 != 0):
            detach = attach_toy(engine, tracer) if traced else None
            t0 = time.perf_counter()
            engine.run(max_steps=steps_per_round)
            times[traced] = time.perf_counter() - t0
            if detach is not None:
                detach()
        t_plain += times[False]
        t_traced += times[True]
        n_plain += steps_per_round
        n_traced += steps_per_round
        pair_ratios.append(times[False] / times[True])
    pub.close()
    stop.set()
    received = out.get(timeout=10)
    sub.join()
    sps_plain, sps_traced = n_plain / t_plain, n_traced / t_traced
    return {
        "untraced_steps_per_s": sps_plain,
        "traced_steps_per_s": sps_traced,
        "ratio": sps_traced / sps_plain,
        "median_pair_ratio": statistics.median(pair_ratios),
        "events_received": received,
        "events_dropped": pub.dropped,
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--steps", type=int, default=40)
    ns = ap.parse_args(argv)
    print(
        f"# bench_tracer_overhead: toy engine, batch {ns.batch}, {ns.rounds} alternating rounds, on {machine()}"
    )
    r = run(ns.batch, ns.rounds, ns.steps)
    print(f"  untraced   {r['untraced_steps_per_s']:8.1f} verify steps/s")
    print(
        f"  traced     {r['traced_steps_per_s']:8.1f} verify steps/s  ({r['events_received']} events received, {r['events_dropped']} dropped)"
    )
    print(
        f"  traced / untraced: {r['median_pair_ratio']:.3f} median of paired rounds, {r['ratio']:.3f} overall  (target >= 0.97)"
    )
    return r


if __name__ == "__main__":
    main()
