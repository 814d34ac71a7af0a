"""``eagle3-top relay --bind ENDPOINT --connect ENDPOINT ...``: many publishers fanned into one
endpoint, frames byte for byte (``tracer/reader/relay.py``), optionally recorded as they pass
(``tracer/reader/relay_recorder.py``). Runs until SIGTERM/SIGINT, which close the recording whole."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, cast

from eagle3_top.tracer.transport.curve_flags import add_client_arguments as add_curve_arguments
from eagle3_top.tracer.transport.curve_flags import add_server_arguments, server_from
from eagle3_top.tracer.transport.curve_flags import client_from as curve_from

from .args import positive_float, positive_int
from .endpoint_args import add_endpoint_arguments, endpoints_from
from .report import EXIT_FINDINGS, EXIT_OK, fail, parse
from .stop_signal import StopSignal

if TYPE_CHECKING:
    from eagle3_top.tracer.reader.relay import Relay
    from eagle3_top.tracer.reader.relay_recorder import CaptureRecorder

PROG = "eagle3-top relay"
STATUS_INTERVAL_S = 10.0
DEFAULT_SNDHWM = 10_000  # tracer/reader/relay.py's, the Publisher's: kept here so --help needs no zmq
RECORD_BUFFER = 20_000  # frames the recorder may fall behind by (~30 MB of batch-64 steps)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} --bind ENDPOINT [--connect] ENDPOINT [ENDPOINT ...] [--record FILE] [...]",
        description="Fan many publishers into one endpoint: every frame passes byte for byte, so the "
        "monitor, check and record work through the relay as on each publisher. Stops on SIGTERM/SIGINT.",
    )
    p.add_argument(
        "--bind",
        required=True,
        metavar="ENDPOINT",
        help="where subscribers connect, e.g. tcp://127.0.0.1:5560",
    )
    p.add_argument(
        "--connect",
        action="extend",
        nargs="+",
        default=[],
        metavar="ENDPOINT",
        help="the publishers to relay (repeatable; written as ENDPOINT)",
    )
    add_endpoint_arguments(p, follows=False)
    p.add_argument(
        "--public",
        action="store_true",
        help="allow a --bind that is not loopback: anyone who reaches it gets the stream unless CURVE is on",
    )
    p.add_argument(
        "--record",
        metavar="FILE",
        help="also record the frames that pass into an MCAP file (those it falls behind on are counted, "
        "in the file too)",
    )
    p.add_argument("--force", action="store_true", help="overwrite the --record FILE if it exists")
    p.add_argument(
        "--record-buffer",
        type=positive_int,
        default=RECORD_BUFFER,
        metavar="N",
        help=f"frames the recorder may fall behind by before it misses some (counted; default {RECORD_BUFFER})",
    )
    p.add_argument(
        "--subscriber-buffer",
        type=positive_int,
        default=DEFAULT_SNDHWM,
        metavar="N",
        help=f"frames queued for each subscriber before a slow one misses some (default {DEFAULT_SNDHWM})",
    )
    p.add_argument(
        "--status-interval",
        type=positive_float,
        default=STATUS_INTERVAL_S,
        metavar="S",
        help=f"seconds between status lines on stderr (default {STATUS_INTERVAL_S:g})",
    )
    p.add_argument(
        "--quiet", action="store_true", help="no status lines (start, refusals and the summary remain)"
    )
    # argument groups take add_argument like a parser
    upstream = p.add_argument_group("CURVE upstream (the relay is the publishers' client)")
    add_curve_arguments(cast(argparse.ArgumentParser, upstream))
    downstream = p.add_argument_group("CURVE downstream (the relay is its subscribers' server)")
    add_server_arguments(cast(argparse.ArgumentParser, downstream))
    return p


def _bind_error(endpoint: str, public: bool) -> str | None:
    """Why ``endpoint`` must not be bound, or None; warns when it is public and allowed."""
    from eagle3_top.tracer.serving.publisher import EndpointError, check_bind_endpoint

    try:
        check_bind_endpoint(endpoint, allow_remote=True)  # its shape and port
    except EndpointError as exc:
        return f"--bind: {exc}"
    try:
        check_bind_endpoint(endpoint)
    except EndpointError:
        if not public:
            return (
                f"--bind {endpoint} is reachable from other machines; add --public to relay on it "
                "anyway (with --curve-secret and --curve-clients to admit only your clients), or "
                "keep it on loopback and tunnel: ssh -N -L PORT:127.0.0.1:PORT HOST"
            )
        print(f"{PROG}: warning: relaying on {endpoint}, reachable from other machines", file=sys.stderr)
    return None


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    ns.endpoints = ns.connect + ns.endpoints
    got = endpoints_from(ns, PROG)
    if isinstance(got, int):
        return got
    upstreams = got.all
    bind = ns.bind if "://" in ns.bind else f"tcp://{ns.bind}"
    why = _bind_error(bind, ns.public)
    if why is not None:
        return fail(PROG, why)
    if ns.record and os.path.exists(ns.record) and not ns.force:
        return fail(PROG, f"{ns.record} exists (--force overwrites it)")
    from eagle3_top.tracer.reader.recording import RecordingWriter
    from eagle3_top.tracer.reader.relay import Relay, RelayError
    from eagle3_top.tracer.reader.relay_recorder import CaptureRecorder
    from eagle3_top.tracer.transport.curve import KeyError_

    try:
        client_curve, server_curve = curve_from(ns), server_from(ns)
    except KeyError_ as exc:
        return fail(PROG, str(exc))
    try:
        relay = Relay(
            bind,
            upstreams,
            client_curve=client_curve,
            server_curve=server_curve,
            capture_hwm=max(1, ns.record_buffer // 2) if ns.record else None,
            sndhwm=ns.subscriber_buffer,
        )
    except RelayError as exc:
        return fail(PROG, str(exc))
    # from here on a signal must reach _finish: it closes the recording whole
    stop = StopSignal()
    recorder = None
    if ns.record:
        try:
            writer = RecordingWriter(ns.record, exclusive=not ns.force)
        except OSError as exc:
            relay.stop()
            return fail(PROG, f"cannot write {ns.record}: {exc.strerror or exc}")
        assert relay.capture_endpoint is not None
        label = ",".join(upstreams)
        recorder = CaptureRecorder(
            relay.context, relay.capture_endpoint, writer, label, max(1, ns.record_buffer // 2)
        )
        recorder.start()
    relay.start()
    to = f" (recording to {ns.record})" if ns.record else ""
    named = ", ".join(upstreams[:4]) + (f" and {len(upstreams) - 4} more" if len(upstreams) > 4 else "")
    print(f"{PROG}: relaying {named} to {relay.bound_endpoint}{to}", file=sys.stderr)
    _run(relay, recorder, stop, None if ns.quiet else ns.status_interval)
    return _finish(relay, recorder, stop, ns.record)


def _run(relay: Relay, recorder: CaptureRecorder | None, stop: StopSignal, interval: float | None) -> None:
    last_t, last_n, before = time.monotonic(), 0, 0
    refused: set[str] = set()
    while relay.running and not stop.wait(0.2):
        relay.poll_states()
        for ep, state in relay.upstreams.items():
            if state.startswith("refused") and ep not in refused:  # said once, --quiet or not
                refused.add(ep)
                print(f"{PROG}: upstream {ep}: {state}", file=sys.stderr)
        now = time.monotonic()
        if interval is None or now - last_t < interval:
            continue
        n = relay.counts().received
        # frames forwarded before the last line and still not recorded are not on their way
        print(_status(relay, recorder, n, (n - last_n) / (now - last_t), before), file=sys.stderr)
        last_t, last_n, before = now, n, n


def _status(relay: Relay, recorder: CaptureRecorder | None, n: int, rate: float, before: int) -> str:
    up = relay.upstreams
    connected = sum(state == "connected" for state in up.values())
    line = f"{PROG}: {n:,} frames forwarded, {rate:,.0f}/s; upstream {connected} of {len(up)} connected"
    down = [f"{ep} {state}" for ep, state in up.items() if state != "connected"]
    if down:  # the first few by name: a rack of them down is one fact, not a screenful
        more = f"; and {len(down) - 3} more" if len(down) > 3 else ""
        line += f" ({'; '.join(down[:3])}{more})"
    if relay.admission is not None and relay.admission.refused:
        line += f"; {relay.admission.refused} subscriber handshakes refused"
    if recorder is not None:
        if recorder.error is not None:
            line += f"; {recorder.error}"
        else:
            line += f"; recorded {recorder.frames:,}, {recorder.not_recorded(before):,} missed"
    return line


def _finish(relay: Relay, recorder: CaptureRecorder | None, stop: StopSignal, path: str | None) -> int:
    counts = relay.stop()
    why = stop.name if stop.stopped else relay.error
    print(
        f"{PROG}: stopped ({why}): {counts.received:,} frames forwarded, {counts.received_bytes:,} bytes",
        file=sys.stderr,
    )
    code = EXIT_OK if stop.stopped else EXIT_FINDINGS
    if recorder is None:
        return code
    recorder.stop(counts.received)
    missed = recorder.not_recorded(counts.received)
    print(
        f"{PROG}: recorded {recorder.frames:,} frames to {path}; {missed:,} not recorded"
        + (" (the recorder fell behind; forwarding went on)" if missed else "")
        + f"; {recorder.gaps.missed:,} missed upstream",
        file=sys.stderr,
    )
    for (_, src), loss in recorder.gaps.losses().items():
        print(f"{PROG}:   {src}: {loss.describe()}", file=sys.stderr)  # src: printable already
    if recorder.error is not None:
        print(f"{PROG}: {recorder.error}", file=sys.stderr)
        return EXIT_FINDINGS
    return code
