"""The recorder's write path in-process, and the size of a recorded hour.

Rate: step events of batch 64 x 4 (as ``step_bodies`` below makes them) handed to
``RecordingWriter.add`` as the record command does, chunks closed every second. Baselines in the
same run, rounds alternating, medians printed: the same frames appended to a plain file (the
floor for any recorder), and the write path before 2026-12-05 (the mcap library's ``Writer``,
which compresses zstd at level 3, and ``decode`` of every frame).

Size: a busy server's hour, simulated: batch 64, 4 draft tokens, 20 verify steps/s, an aux
fingerprint every 0.2 s (the SGLang plugin's default) of 3 slots, health every second, hello every
5 s; rids as SGLang makes them (32 hex digits), a request living ~100 steps; token ids uniform
over a 128,256-token vocabulary (random ids compress worst); one chunk a second, as the recorder
closes them at that rate.

    python -m benchmarks.bench_record [--events 100000] [--rounds 3] [--sweep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator

import numpy as np
from eagle3_top.tracer.reader.recording import RecordingWriter, read_recording
from eagle3_top.tracer.schema import (
    AUX,
    HEALTH,
    HELLO,
    STEP,
    AuxWiring,
    Fingerprint,
    Health,
    Hello,
    ModelInfo,
    SpecConfig,
    aux_body,
    decode,
    encode,
    step_body,
)

from benchmarks.common import machine

ENDPOINT = "tcp://127.0.0.1:5557"


def step_bodies(
    n: int, batch: int = 64, width: int = 4, vocab: int = 128_256, seed: int = 1
) -> Iterator[dict[str, object]]:
    """Step bodies as a busy SGLang server's tracer builds them, one verify step after another:
    rids of 32 hex digits (SGLang's), a request ending with probability 1% a step; the root of a
    draft is the token committed last; drafts and bonus tokens uniform over ``vocab``."""
    rng = np.random.default_rng(seed)
    rids = [rng.bytes(16).hex() for _ in range(batch)]
    last = rng.integers(1, vocab, batch)
    for step in range(n):
        for r in np.flatnonzero(rng.random(batch) < 0.01):
            rids[r] = rng.bytes(16).hex()
        draft = rng.integers(1, vocab, (batch, width))
        draft[:, 0] = last
        acc = rng.integers(0, width, batch)
        bonus = rng.integers(1, vocab, batch)
        tokens = np.concatenate([np.append(draft[i, 1 : 1 + acc[i]], bonus[i]) for i in range(batch)])
        last = bonus
        yield step_body(
            step=step, rids=rids, draft=draft.astype(np.int32), accept_lens=(acc + 1).astype(np.int32),
            tokens=tokens.astype(np.int32), dt=0.045,
        )  # fmt: skip


def frames(n: int) -> list[bytes]:
    return [encode(STEP, "gpu-box:1234:r0", i, 1.7e9 + i * 0.05, b) for i, b in enumerate(step_bodies(n))]


def _hello() -> Hello:
    spec = SpecConfig("EAGLE3", 3, 1, 4)
    return Hello(
        engine="sglang", engine_version="0.5.17",
        model=ModelInfo(target_path="/models/Llama-3.1-8B-Instruct", draft_path="/models/eagle3-llama",
                        num_layers=32, hidden_size=4096),
        requested=spec, effective=spec,
        aux=AuxWiring(declared_ids=[1, 15, 28], ids_location="eagle_config", ids_read=[1, 15, 28],
                      capture_native=[2, 16, 29], capture_canonical=[1, 15, 28], family="llama", slots=3,
                      width=3 * 4096, expected_width=3 * 4096),
    )  # fmt: skip


def busy_hour(
    seconds: int = 3600, batch: int = 64, width: int = 4, steps_per_s: int = 20, vocab: int = 128_256
) -> Iterator[tuple[int, str, bytes]]:
    """(second, kind, frame) for each event a busy server's tracer publishes, in order."""
    rng = np.random.default_rng(2)
    src = "gpu-box:4242:r0"
    steps = step_bodies(seconds * steps_per_s, batch, width, vocab)
    seq = step = 0
    hello = _hello().to_body()
    t0 = 1.7e9
    for s in range(seconds):
        events: list[tuple[str, dict[str, object]]] = []
        if s % 5 == 0:
            events.append((HELLO, hello))
        for k in range(steps_per_s):
            events.append((STEP, next(steps)))
            step += 1
            if k % (steps_per_s // 5) == 0:  # an aux fingerprint every 0.2 s
                fp = Fingerprint(
                    rows=batch * width, slots=3, slot_width=4096,
                    mean=tuple(rng.normal(0, 0.1, 3)), rms=tuple(rng.random(3) + 1), std=tuple(rng.random(3) + 1),
                    absmax=tuple(rng.random(3) * 40), nan=(0, 0, 0), inf=(0, 0, 0),
                    sketch=tuple(tuple(rng.normal(0, 1, 16)) for _ in range(3)),
                )  # fmt: skip
                events.append((AUX, aux_body(step, "verify_aux", fp)))
        events.append((HEALTH, Health(sent=seq, dropped=0, queue=3, queue_max=4096, started=t0).to_body()))
        for j, (kind, body) in enumerate(events):
            yield s, kind, encode(kind, src, seq, t0 + s + j / len(events), body)
            seq += 1


def plain(stream: list[bytes], path: str) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for fr in stream:
            f.write(fr)
    return time.perf_counter() - t0


def ours(stream: list[bytes], path: str, compression: str, zstd_level: int = 1) -> float:
    w = RecordingWriter(path, compression=compression, zstd_level=zstd_level)
    t0 = time.perf_counter()
    recv = time.time_ns()
    for i, fr in enumerate(stream):
        w.add(fr, ENDPOINT, recv + i * 50_000_000)
        if i % 1024 == 0:
            w.tick()
    w.close()
    return time.perf_counter() - t0


def before(stream: list[bytes], path: str) -> float:
    """The write path as it was: the library's Writer (zstd level 3) and a full decode per frame."""
    from mcap.writer import CompressionType, Writer

    with open(path, "wb") as f:
        w = Writer(f, chunk_size=4 << 20, compression=CompressionType.ZSTD)
        w.start(profile="eagle3-top", library="eagle3-top")
        schema = w.register_schema("eagle3-top/v1", "text", b"x")
        channels: dict[tuple[str, str], int] = {}
        t0 = time.perf_counter()
        last_flush = time.monotonic()
        recv = time.time_ns()
        for i, fr in enumerate(stream):
            ev = decode(fr)  # as RecordingWriter.add did
            cid = channels.get((ev.src, ENDPOINT))
            if cid is None:
                cid = channels[(ev.src, ENDPOINT)] = w.register_channel(ev.src, "msgpack", schema, {})
            w.add_message(
                cid, log_time=recv + i * 50_000_000, data=fr, publish_time=int(ev.ts * 1e9), sequence=ev.seq
            )
            if i % 1024 == 0 and time.monotonic() - last_flush >= 1.0:
                w.flush()
                last_flush = time.monotonic()
        w.finish()
        return time.perf_counter() - t0


def hour_sizes(d: str) -> None:
    variants = {"zstd 1 (default)": ("zstd", 1), "zstd 3": ("zstd", 3), "lz4": ("lz4", 1)}
    paths = {name: os.path.join(d, f"hour-{i}.mcap") for i, name in enumerate(variants)}
    writers = {
        name: RecordingWriter(paths[name], flush_interval_s=0, compression=c, zstd_level=lv)
        for name, (c, lv) in variants.items()
    }
    raw = n = steps = 0
    current = 0
    for s, kind, fr in busy_hour():
        if s != current:  # one chunk per second, as the recorder closes them on a busy stream
            for w in writers.values():
                w.tick()
            current = s
        for w in writers.values():
            w.add(fr, ENDPOINT, 1_700_000_000 * 10**9 + s * 10**9)
        raw += len(fr)
        n += 1
        steps += kind == STEP
    print(
        f"  a busy server's hour: {n:,} events ({steps:,} step events of batch 64 x 4), {raw / 1e6:,.0f} MB raw"
    )
    for name, w in writers.items():
        w.close()
        size = os.path.getsize(paths[name])
        print(
            f"    {name:17s} {size / 1e6:6.1f} MB per hour, {size / steps:,.0f} B per step event, "
            f"x{raw / size:.2f} compression"
        )


def sweep(stream: list[bytes], d: str) -> None:
    """zstd level x chunk size: rate and size on the flood frames."""
    from eagle3_top.tracer.reader.recording import writer as writer_module

    saved = writer_module.CHUNK_SIZE
    try:
        for level in (-1, 1, 3):
            for chunk in (1 << 20, 4 << 20, 16 << 20):
                writer_module.CHUNK_SIZE = chunk
                path = os.path.join(d, "sweep.mcap")
                t = statistics.median(ours(stream, path, "zstd", level) for _ in range(3))
                print(
                    f"    zstd {level:2d}, chunks of {chunk >> 20:2d} MB: {len(stream) / t:9,.0f} events/s, "
                    f"{os.path.getsize(path) / len(stream):,.0f} B per event"
                )
    finally:
        writer_module.CHUNK_SIZE = saved


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="also zstd level x chunk size")
    ap.add_argument("--no-hour", action="store_true", help="skip the busy server's hour (~1 min)")
    ns = ap.parse_args(argv)
    distinct = frames(2_000)  # encoding is not what is measured: cycle through a few thousand
    stream = [distinct[i % len(distinct)] for i in range(ns.events)]
    raw_bytes = sum(map(len, stream))
    times: dict[str, list[float]] = {k: [] for k in ("plain", "before", "zstd", "lz4")}
    with tempfile.TemporaryDirectory() as d:
        path = {k: os.path.join(d, f"{k}.out") for k in times}
        for _ in range(ns.rounds):
            times["plain"].append(plain(stream, path["plain"]))
            times["before"].append(before(stream, path["before"]))
            times["zstd"].append(ours(stream, path["zstd"], "zstd"))
            times["lz4"].append(ours(stream, path["lz4"], "lz4"))
        for comp in ("zstd", "lz4"):
            assert sum(1 for _ in read_recording(path[comp])) == ns.events
        t0 = time.perf_counter()
        assert sum(1 for _ in read_recording(path["zstd"])) == ns.events
        t_read = time.perf_counter() - t0
        sizes = {k: os.path.getsize(p) for k, p in path.items()}

        def rate(k: str) -> float:
            return ns.events / statistics.median(times[k])

        def ratio(k: str) -> float:  # per round against that round's plain file, then the median
            return statistics.median(p / t for p, t in zip(times["plain"], times[k], strict=True))

        print(
            f"# bench_record: {ns.events:,} step events (batch 64 x 4), in-process, "
            f"medians of {ns.rounds} rounds, on {machine()}"
        )
        print(f"  plain file append              {rate('plain'):10,.0f} events/s (baseline)")
        lines = {
            "before": "before: mcap Writer + decode ",
            "zstd": "zstd (default, level 1)       ",
            "lz4": "lz4 (--compression lz4)       ",
        }
        for k, label in lines.items():
            print(
                f"  {label} {rate(k):10,.0f} events/s (ratio {ratio(k):.2f}); "
                f"{sizes[k] / ns.events:,.0f} B per event (x{raw_bytes / sizes[k]:.2f})"
            )
        print(f"  now / before: {statistics.median(b / z for b, z in zip(times['before'], times['zstd'], strict=True)):.2f}x")  # fmt: skip
        print(f"  read back (zstd)               {ns.events / t_read:10,.0f} events/s")
        if ns.sweep:
            sweep(stream[: min(len(stream), 60_000)], d)
        if not ns.no_hour:
            hour_sizes(d)


if __name__ == "__main__":
    main()
