"""``eagle3-top record``: store every frame of one or more streams, as received, in an MCAP file.

Headless and meant to run for days: SIGTERM or SIGINT closes the file cleanly (summary written);
a SIGKILL loses at most the last second (the chunk in progress)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from types import FrameType

from .args import endpoint_list, positive_float
from .curve_args import add_curve_arguments, curve_from
from .report import EXIT_OK, fail, parse

PROG = "eagle3-top record"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Record every frame of the streams, byte for byte, into an MCAP file "
        "(docs/recording.md). Stops on SIGTERM/SIGINT or after --duration.",
    )
    p.add_argument(
        "endpoints", nargs="+", metavar="ENDPOINT", help="tcp://HOST:PORT, HOST:PORT or ipc://PATH"
    )
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the .mcap file to write")
    p.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_curve_arguments(p)
    return p


class _Stop:
    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    endpoints, bad = endpoint_list(ns.endpoints)
    for msg in bad:
        print(f"{PROG}: {msg} (skipped)", file=sys.stderr)
    if not endpoints:
        return fail(PROG, "no valid endpoint")
    if os.path.exists(ns.output) and not ns.force:
        return fail(PROG, f"{ns.output} exists (--force overwrites it)")
    from eagle3_top.tracer.curve import KeyError_
    from eagle3_top.tracer.recording import RecordingWriter
    from eagle3_top.tracer.subscriber import Subscriber

    try:
        curve = curve_from(ns)
    except KeyError_ as exc:
        return fail(PROG, str(exc))
    try:
        writer = RecordingWriter(ns.output)
    except OSError as exc:
        return fail(PROG, f"cannot write {ns.output}: {exc.strerror or exc}")
    stop = _Stop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    # One socket per endpoint: a shared SUB socket would not say which endpoint a frame came from.
    subs = [(ep, Subscriber([ep], curve=curve)) for ep in endpoints]
    wait_ms = max(1, 50 // len(subs))
    deadline = time.monotonic() + ns.duration if ns.duration else None
    print(f"{PROG}: recording {', '.join(endpoints)} to {ns.output}", file=sys.stderr)
    try:
        while stop.signum is None and (deadline is None or time.monotonic() < deadline):
            for ep, sub in subs:
                frames = sub.recv_frames(wait_ms)
                # one receive time for the batch: they were all queued by the time poll returned
                recv_ns = time.time_ns()
                for frame in frames:
                    writer.add(frame, ep, recv_ns)
            writer.tick()
    finally:
        writer.close()
        for _, sub in subs:
            sub.close()
    why = f"signal {signal.Signals(stop.signum).name}" if stop.signum is not None else "--duration"
    print(f"{PROG}: stopped ({why}): {writer.frames} frames, {writer.bytes} bytes", file=sys.stderr)
    return EXIT_OK
