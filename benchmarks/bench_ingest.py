"""The monitor's receive path without sockets: frames decoded and folded into the evidence book.

Same frames, same run: ours = ``schema.decode`` + ``EvidenceBook.ingest`` (the shape checks per
event, value checks and counting per batch), in batches of 256 like the feed thread; then the same
with the per-request fold the feed runs a few times a second (here after every batch, timed: the
monitor pays it); baseline = ``msgpack.unpackb`` of each frame alone (the floor for any Python
subscriber). Step events of batch 64 x 16 with random acceptance.

    python -m benchmarks.bench_ingest
"""

from __future__ import annotations

import time

import msgpack
import numpy as np
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.schema import STEP, decode, encode, step_body

from benchmarks.common import machine

BATCH = 256


def frames(n: int = 64, batch: int = 64, width: int = 16) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        acc = rng.integers(0, width, batch).astype(np.int32)
        body = step_body(
            step=i,
            rids=[f"q{j}" for j in range(batch)],
            draft=rng.integers(1, 30_000, (batch, width)).astype(np.int32),
            accept_lens=acc + 1,
            tokens=rng.integers(1, 30_000, int(acc.sum()) + batch).astype(np.int32),
        )
        out.append(encode(STEP, "h:1:r0", i, 0.0, body))
    return out * 40


def best(fn, repeat: int = 15) -> float:  # type: ignore[no-untyped-def]
    t = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main() -> dict[str, float]:
    fs = frames()

    def ours() -> None:
        book = EvidenceBook()
        for k in range(0, len(fs), BATCH):
            book.ingest([decode(f) for f in fs[k : k + BATCH]], 1000.0)
        assert book.sources["h:1:r0"].steps == len(fs)

    def ours_folded() -> None:
        book = EvidenceBook()
        for k in range(0, len(fs), BATCH):
            book.ingest([decode(f) for f in fs[k : k + BATCH]], 1000.0)
            book.sources["h:1:r0"].requests.fold()
        assert book.sources["h:1:r0"].steps == len(fs)

    def raw() -> None:
        for f in fs:
            msgpack.unpackb(f, raw=False)

    t_ours, t_fold, t_raw = best(ours), best(ours_folded), best(raw)
    print(f"# bench_ingest: {len(fs)} step events (batch 64 x 16), in-process, on {machine()}")
    print(f"  msgpack.unpackb alone   {t_raw / len(fs) * 1e6:6.2f} us/event")
    print(
        f"  decode + ingest         {t_ours / len(fs) * 1e6:6.2f} us/event ({len(fs) / t_ours:,.0f} events/s)"
    )
    print(f"  + the per-request fold  {t_fold / len(fs) * 1e6:6.2f} us/event (what the monitor's feed pays)")
    print(f"  raw / ours: {t_raw / t_ours:.2f}  (the share of the floor the monitor keeps)")
    return {
        "ours_us": t_ours / len(fs) * 1e6,
        "folded_us": t_fold / len(fs) * 1e6,
        "raw_us": t_raw / len(fs) * 1e6,
        "ratio": t_raw / t_ours,
    }


if __name__ == "__main__":
    main()
