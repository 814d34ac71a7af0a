"""The recorder's write path, in-process: step events of batch 64 x 4 (random acceptance, real token
ids) handed to ``RecordingWriter.add`` as the record command does, chunks closed every second.
Baseline in the same run: the same frames appended to a plain file (the floor for any recorder).
Also the size on disk: bytes per step event and the compression ratio.

    python -m benchmarks.bench_record [--events 200000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from eagle3_top.tracer.recording import RecordingWriter, read_recording
from eagle3_top.tracer.schema import STEP, encode, step_body

from benchmarks.common import machine


def frames(n: int, batch: int = 64, width: int = 4) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        acc = rng.integers(0, width, batch).astype(np.int32)
        body = step_body(
            step=i, rids=[f"req-{(i // 50) * batch + r}" for r in range(batch)],
            draft=rng.integers(1, 32_000, (batch, width)).astype(np.int32), accept_lens=acc + 1,
            tokens=rng.integers(1, 32_000, int(acc.sum()) + batch).astype(np.int32), dt=0.004,
        )  # fmt: skip
        out.append(encode(STEP, "gpu-box:1234:r0", i, 1.7e9 + i * 0.05, body))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=200_000)
    ns = ap.parse_args(argv)
    distinct = frames(2_000)  # encoding is not what is measured: cycle through a few thousand
    stream = [distinct[i % len(distinct)] for i in range(ns.events)]
    raw_bytes = sum(map(len, stream))
    with tempfile.TemporaryDirectory() as d:
        plain = os.path.join(d, "plain.bin")
        t0 = time.perf_counter()
        with open(plain, "wb") as f:
            for fr in stream:
                f.write(fr)
        t_plain = time.perf_counter() - t0

        results = {}
        for comp in ("zstd", "lz4"):
            path = os.path.join(d, f"run-{comp}.mcap")
            w = RecordingWriter(path, compression=comp)
            t0 = time.perf_counter()
            recv = time.time_ns()
            for i, fr in enumerate(stream):
                w.add(fr, "tcp://127.0.0.1:5557", recv + i * 50_000_000)
                if i % 1024 == 0:
                    w.tick()
            w.close()
            t_rec = time.perf_counter() - t0
            t0 = time.perf_counter()
            back = sum(1 for _ in read_recording(path))
            results[comp] = (t_rec, os.path.getsize(path), time.perf_counter() - t0, back)
    print(f"# bench_record: {ns.events:,} step events (batch 64 x 4), in-process, on {machine()}")
    print(f"  plain file append        {ns.events / t_plain:12,.0f} events/s (baseline)")
    for comp, (t_rec, size, t_read, back) in results.items():
        assert back == ns.events
        print(
            f"  {comp}: RecordingWriter.add {ns.events / t_rec:10,.0f} events/s (ratio {t_plain / t_rec:.2f}); "
            f"read back {ns.events / t_read:,.0f} events/s"
        )
        print(
            f"        on disk {size / ns.events:,.0f} B per step event ({raw_bytes / ns.events:,.0f} B raw): "
            f"x{raw_bytes / size:.1f}; an hour at 20 steps/s: {size / ns.events * 72_000 / 1e6:.0f} MB"
        )  # fmt: skip


if __name__ == "__main__":
    main()
