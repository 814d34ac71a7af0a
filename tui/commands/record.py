"""``eagle3-top record``: store every frame of one or more streams, as received, in an MCAP file.

Headless and meant to run for days: SIGTERM or SIGINT closes the file cleanly (summary written);
a SIGKILL loses at most the last second (the chunk in progress)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from eagle3_top.tracer.transport.curve_flags import add_client_arguments as add_curve_arguments
from eagle3_top.tracer.transport.curve_flags import client_from as curve_from

from .args import positive_float
from .endpoint_args import add_endpoint_arguments, endpoints_from
from .report import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, fail, parse
from .stop_signal import StopSignal

PROG = "eagle3-top record"
# Frames that may wait in each endpoint's socket. Past it the connection stops reading and the
# publisher's socket drops what it cannot queue: under overload the recorder writes at its ceiling
# and the rest shows as holes in seq, counted ("missed"). A deep queue bought nothing but cost: at
# 100,000 a flood kept 50,000 - 100,000 frames (~400 MB) in flight, each one read back long after
# it was received, out of cache, and the recorder spent 27 - 28 us of CPU a frame written against
# 20 - 21 us with 500 - 4,000 (the same flood, same box, in turn).
RCVHWM = 2_000


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Record every frame of the streams, byte for byte, into an MCAP file "
        "(docs/recording.md). Stops on SIGTERM/SIGINT or after --duration.",
    )
    add_endpoint_arguments(p, follows=False)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the .mcap file to write")
    p.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument(
        "--rotate-size",
        type=positive_float,
        metavar="MB",
        help="start a new file once this one holds MB megabytes (FILE, then FILE.1, FILE.2, ...)",
    )
    p.add_argument("--rotate-time", type=positive_float, metavar="S", help="start a new file every S seconds")
    p.add_argument(
        "--compression",
        choices=("zstd", "lz4", "none"),
        default="zstd",
        help="chunk compression (default zstd, level 1; lz4: bigger files, about as fast)",
    )
    add_curve_arguments(p)
    return p


def rotated_name(path: str, index: int) -> str:
    """``run.mcap``, then ``run.1.mcap``, ``run.2.mcap``: every part is a complete recording."""
    if index == 0:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.{index}{ext or '.mcap'}"


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    given = endpoints_from(ns, PROG)
    if isinstance(given, int):
        return given
    endpoints = given.all
    if os.path.exists(ns.output) and not ns.force:
        return fail(PROG, f"{ns.output} exists (--force overwrites it)")
    from eagle3_top.tracer.reader.recording import RecordingWriter, SeqGaps
    from eagle3_top.tracer.reader.subscriber import Subscriber
    from eagle3_top.tracer.transport.curve import KeyError_

    try:
        curve = curve_from(ns)
    except KeyError_ as exc:
        return fail(PROG, str(exc))
    try:
        writer = RecordingWriter(ns.output, compression=ns.compression, exclusive=not ns.force)
    except OSError as exc:
        return fail(PROG, f"cannot write {ns.output}: {exc.strerror or exc}")
    stop = StopSignal()
    # One socket per endpoint: a shared SUB socket would not say which endpoint a frame came from.
    subs = [(ep, Subscriber([ep], curve=curve, rcvhwm=RCVHWM)) for ep in endpoints]
    wait_ms = max(1, 50 // len(subs))
    deadline = time.monotonic() + ns.duration if ns.duration else None
    rotate_bytes = int(ns.rotate_size * 1e6) if ns.rotate_size else None
    part, opened = 0, time.monotonic()
    frames = nbytes = 0
    # from the envelopes the writer reads anyway: decoding every frame again (4 - 5 µs) would cost
    # about a fifth of the one-core rate (benchmarks/bench_record_e2e.py)
    gaps = SeqGaps()
    missed_before = 0  # of gaps.missed, counted in the parts already closed
    error: str | None = None
    refused: dict[str, str] = {}  # endpoint -> why its server refused us (said once, as it happens)
    print(f"{PROG}: recording {', '.join(endpoints)} to {ns.output}", file=sys.stderr)
    try:
        while not stop.stopped and (deadline is None or time.monotonic() < deadline):
            for ep, sub in subs:
                batch = sub.recv_frames(wait_ms)
                state = sub.endpoints.get(ep, "")
                if state.startswith("refused") and ep not in refused:
                    refused[ep] = state
                    print(f"{PROG}: {ep}: {state}: nothing of it is recorded", file=sys.stderr)
                # one receive time for the batch: they were all queued by the time poll returned
                recv_ns = time.time_ns()
                for frame in batch:
                    env = writer.add(frame, ep, recv_ns)
                    if env is not None:
                        gaps.see(ep, env)
            writer.tick()
            due = (rotate_bytes is not None and writer.file_bytes >= rotate_bytes) or (
                ns.rotate_time is not None and time.monotonic() - opened >= ns.rotate_time
            )
            if due:
                frames, nbytes = frames + writer.frames, nbytes + writer.bytes
                writer.close(missed=gaps.missed - missed_before)
                missed_before = gaps.missed
                part, opened = part + 1, time.monotonic()
                writer = RecordingWriter(
                    rotated_name(ns.output, part), compression=ns.compression, exclusive=not ns.force
                )
                print(f"{PROG}: now writing {rotated_name(ns.output, part)}", file=sys.stderr)
    except OSError as exc:
        # A full disk, say: what is already on disk stays readable (chunks closed every second).
        error = f"cannot write {rotated_name(ns.output, part)}: {exc.strerror or exc}"
    finally:
        try:
            writer.close(missed=gaps.missed - missed_before)
        except OSError as exc:
            error = error or f"cannot finish {rotated_name(ns.output, part)}: {exc.strerror or exc}"
        for _, sub in subs:
            sub.close()
    frames, nbytes = frames + writer.frames, nbytes + writer.bytes
    parts = f" in {part + 1} files" if part else ""
    if error is not None:
        print(
            f"{PROG}: {error}; {frames} frames recorded before{parts} (eagle3-top dump reads them)",
            file=sys.stderr,
        )
        return EXIT_FINDINGS
    why = stop.name if stop.stopped else "--duration"
    print(
        f"{PROG}: stopped ({why}): {frames} frames, {nbytes} bytes, {gaps.missed} missed{parts}",
        file=sys.stderr,
    )
    for (ep, src), loss in gaps.losses().items():
        print(f"{PROG}:   {src} via {ep}: {loss.describe()}", file=sys.stderr)  # src: printable already
    if gaps.evictions.total:  # their frames are recorded; only their seq counts were forgotten
        print(f"{PROG}: seq counts of {gaps.evictions.describe()}", file=sys.stderr)
    if refused:  # a connection problem, not a recording: the exit status says so, as check's does
        print(f"{PROG}: refused by {len(refused)} of {len(endpoints)} endpoint(s): {', '.join(refused)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    return EXIT_OK
