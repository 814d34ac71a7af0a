"""Replay as fast as possible, against raw msgpack decoding of the same frames from memory.

The recording: a busy server (bench_record's busy hour: batch 64 x 4, 20 verify steps/s, an aux
fingerprint every 0.2 s, health every second, hello every 5 s), ``--seconds`` of it, written by
``RecordingWriter`` with a chunk a second as ``eagle3-top record`` closes them.

Measured in the same run, rounds alternating, medians printed:

- baseline: ``msgpack.unpackb`` of every frame, the frames already in memory as a list of bytes;
- replay decode: what the replay's worker does to each frame the ``Timeline`` holds in memory
  (``FrameLedger.decode_frame``: unpack, envelope checks, per-source counts);
- open: reading the file into the ``Timeline`` (read, zstd, record parsing), paid once per open;
- from the file: the two together, for a reader that streams a file once (``check --replay``);
- replay to the end: ``ReplayFeed`` at ``max`` speed on its own thread, from opening the file to
  the last frame folded into the evidence book and the findings run: what the screen waits for;
- seek back: at the end, a seek to 99 %: the book rebuilt from the start, as the ``←`` key does.

    python -m benchmarks.bench_replay [--seconds 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import msgpack
from eagle3_top.tracer.reader.ledger import FrameLedger
from eagle3_top.tracer.reader.recording import RecordingWriter, read_recording
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tui.replay_feed import ReplayFeed

from benchmarks.bench_record import ENDPOINT, busy_hour
from benchmarks.common import machine

T0_NS = 1_700_000_000 * 10**9


def write(path: str, seconds: int) -> list[bytes]:
    w = RecordingWriter(path, flush_interval_s=0)
    frames: list[bytes] = []
    current = 0
    for s, _kind, fr in busy_hour(seconds=seconds):
        if s != current:
            w.tick()
            current = s
        w.add(fr, ENDPOINT, T0_NS + s * 10**9 + len(frames) % 1000)
        frames.append(fr)
    w.close()
    return frames


def raw_unpack(frames: list[bytes]) -> float:
    unpackb = msgpack.unpackb
    t0 = time.perf_counter()
    for fr in frames:
        unpackb(fr)
    return time.perf_counter() - t0


def replay_decode(recorded: list[bytes]) -> float:
    ledger = FrameLedger()
    decode = ledger.decode_frame
    t0 = time.perf_counter()
    for data in recorded:
        decode(data)
    took = time.perf_counter() - t0
    assert not ledger.malformed and ledger.frames == len(recorded)
    return took


def open_file(path: str) -> float:
    t0 = time.perf_counter()
    Timeline(path, speed=None)
    return time.perf_counter() - t0


def from_file(path: str) -> float:
    t0 = time.perf_counter()
    decode = FrameLedger().decode_frame
    for f in read_recording(path):
        decode(f.data)
    return time.perf_counter() - t0


def wait_done(feed: ReplayFeed, total: int) -> None:
    while not (feed.position().delivered == total and feed.position().at_end and not feed._moved):
        time.sleep(0.001)


def replay_to_end(path: str) -> tuple[float, float, int]:
    """Seconds to replay the whole file, seconds to rebuild after a seek to 99 %, frames."""
    t0 = time.perf_counter()
    tl = Timeline(path, speed=None)
    feed = ReplayFeed(tl, poll_ms=1, max_batch=4096).start()
    try:
        total = len(tl.frames)
        wait_done(feed, total)
        whole = time.perf_counter() - t0
        t1 = time.perf_counter()
        tl.seek_fraction(0.99)
        while feed.position().delivered == total:  # the rewind has not been taken yet
            time.sleep(0.0005)
        while not (tl._target is None and not feed._moved):
            time.sleep(0.0005)
        back = time.perf_counter() - t1
    finally:
        feed.stop()
    return whole, back, total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=600, help="seconds of busy stream in the recording")
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args(argv)
    print(f"# bench_replay ({machine()})")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "busy.mcap")
        frames = write(path, ns.seconds)
        n = len(frames)
        size = os.path.getsize(path)
        print(f"  recording: {ns.seconds} s of a busy server, {n:,} frames, {size / 1e6:.1f} MB")
        recorded = [f.data for f in read_recording(path)]
        assert recorded == frames
        runs: dict[str, list[float]] = {k: [] for k in ("raw", "decode", "open", "file", "whole", "back")}
        for _ in range(ns.rounds):
            runs["raw"].append(raw_unpack(frames))
            runs["decode"].append(replay_decode(recorded))
            runs["open"].append(open_file(path))
            runs["file"].append(from_file(path))
            w, b, total = replay_to_end(path)
            assert total == n
            runs["whole"].append(w)
            runs["back"].append(b)
        med = {k: statistics.median(v) for k, v in runs.items()}
        base = n / med["raw"]

        def line(label: str, key: str, extra: str = "") -> None:
            rate = n / med[key]
            print(f"  {label:36s} {rate:10,.0f} frames/s  x{rate / base:.2f} of raw{extra}")

        print(f"  {'raw msgpack.unpackb from memory':36s} {base:10,.0f} frames/s")
        line("replay decode (Timeline in memory)", "decode", "  (target >= 0.5)")
        line("open (read, decompress, parse)", "open", f"  {med['open']:.2f} s once")
        line("open + decode (check --replay)", "file")
        line("replay to the end (book, findings)", "whole", f"  {med['whole']:.2f} s, open included")
        print(f"  {'seek back to 99% (rebuild)':36s} {med['back']:10.2f} s")


if __name__ == "__main__":
    main()
