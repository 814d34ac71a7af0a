"""The monitor's receive path without sockets: frames decoded and folded into the evidence book.

Same frames, same run: ours = ``schema.decode`` + ``EvidenceBook.ingest`` (the shape checks per
event, value checks and counting per batch), in batches of 256 like the feed thread, with the
per-request fold the feed runs 4x a second after every 4 batches (~1,000 events at this rate), its
time counted apart: ``ours_us`` is the receive path, ``fold_us`` what the per-request figures add;
baseline = ``msgpack.unpackb`` of each frame alone (the floor for any Python subscriber). Step events
of batch 64 x 16 with random acceptance. Without the fold the parked request-steps would pile up
over the whole run, which the feed never lets happen.

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
FOLD_EVERY = 4


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

    def ours() -> tuple[float, float]:
        """Seconds in decode + ingest, and in the folds between."""
        book = EvidenceBook()
        t_in = t_fold = 0.0
        for i, k in enumerate(range(0, len(fs), BATCH)):
            t0 = time.perf_counter()
            book.ingest([decode(f) for f in fs[k : k + BATCH]], 1000.0)
            t1 = time.perf_counter()
            if i % FOLD_EVERY == FOLD_EVERY - 1:
                book.sources["h:1:r0"].requests.fold()
            t_in, t_fold = t_in + t1 - t0, t_fold + time.perf_counter() - t1
        assert book.sources["h:1:r0"].steps == len(fs)
        return t_in, t_fold

    def raw() -> None:
        for f in fs:
            msgpack.unpackb(f, raw=False)

    runs = [ours() for _ in range(15)]
    t_ours = min(r[0] for r in runs)
    t_fold = min(r[1] for r in runs)
    t_raw = best(raw)
    print(f"# bench_ingest: {len(fs)} step events (batch 64 x 16), in-process, on {machine()}")
    print(f"  msgpack.unpackb alone   {t_raw / len(fs) * 1e6:6.2f} us/event")
    print(
        f"  decode + ingest         {t_ours / len(fs) * 1e6:6.2f} us/event ({len(fs) / t_ours:,.0f} events/s)"
    )
    print(
        f"  + the per-request fold  {t_fold / len(fs) * 1e6:6.2f} us/event (every {FOLD_EVERY} batches, as the feed)"
    )
    print(f"  raw / ours: {t_raw / t_ours:.2f}  (the share of the floor the monitor keeps)")
    return {
        "ours_us": t_ours / len(fs) * 1e6,
        "fold_us": t_fold / len(fs) * 1e6,
        "raw_us": t_raw / len(fs) * 1e6,
        "ratio": t_raw / t_ours,
    }


if __name__ == "__main__":
    main()
