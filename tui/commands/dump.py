"""``eagle3-top dump``: the frames of a recording, one line each, filtered by kind, source and time.

Human lines by default, JSON lines with ``--json`` (``frame_json``). The file's integrity report
goes to stderr at the end, one line per problem: exit 0 for a complete file, 3 when something was
lost, 2 for a file that is missing, not a recording, or of a newer stream version. A reader that
closes the pipe (``dump run.mcap | head``) ends the dump quietly, exit 0."""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from eagle3_top.tracer.reader.recording import RecordedFrame, RecordingReader
from eagle3_top.tracer.schema import KINDS, DecodeError, Event, decode

from .frame_json import frame_json
from .frame_text import frame_summary
from .report import EXIT_OK, EXIT_PARTIAL, fail, parse, quiet_stdout, safe

PROG = "eagle3-top dump"
UNDECODABLE = "undecodable"  # a frame that is not a v1 event
UNKNOWN = "unknown"  # a v1 event of a kind this eagle3-top does not know
KIND_WORDS = (*sorted(KINDS), UNDECODABLE, UNKNOWN)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Since:
    """``--since``: seconds from the recording's first frame, or a time (ns since the epoch)."""

    seconds: float | None = None
    at_ns: int | None = None

    def threshold(self, first_ns: int) -> int:
        return self.at_ns if self.at_ns is not None else first_ns + int((self.seconds or 0.0) * 1e9)


def since_arg(text: str) -> Since:
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: seconds must be a finite number, 0 or more")
        return Since(seconds=seconds)
    iso = text.strip()
    try:
        t = datetime.fromisoformat(iso[:-1] + "+00:00" if iso.endswith(("Z", "z")) else iso)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither seconds from the first frame nor an ISO time (2025-01-31T12:00:00Z)"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)  # recordings span machines: a time without a zone is UTC
    return Since(at_ns=(t - _EPOCH) // timedelta(microseconds=1) * 1000)


def kinds_arg(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in KIND_WORDS]
    if bad or not words:
        raise argparse.ArgumentTypeError(f"{text!r}: kinds are {', '.join(KIND_WORDS)}")
    return words


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Print the frames of a recording made by eagle3-top record."
    )
    p.add_argument("file", metavar="FILE", help="an .mcap file")
    p.add_argument(
        "--kind", action="append", type=kinds_arg, metavar="K",
        help=f"only these kinds (repeat it, or separate with commas): {', '.join(KIND_WORDS)}",
    )  # fmt: skip
    p.add_argument(
        "--source", action="append", metavar="S",
        help="only sources whose id (HOST:PID:rRANK) contains S; with * ? or [ in it, S is a glob the "
        "whole id must match; repeat it for several (undecodable frames: their channel, 'undecodable')",
    )  # fmt: skip
    p.add_argument(
        "--since", type=since_arg, metavar="T",
        help="only frames received T seconds after the recording's first frame or later, or from the "
        "ISO time T on (2025-01-31T12:00:00Z; UTC when it names no zone)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object per frame (docs/recording.md)")
    return p


def source_matcher(patterns: list[str]) -> Callable[[str], bool]:
    globs = [p for p in patterns if any(c in p for c in "*?[")]
    subs = [p for p in patterns if p not in globs]
    return lambda src: any(s in src for s in subs) or any(fnmatch.fnmatchcase(src, g) for g in globs)


class _OutputError(Exception):
    """Writing to stdout failed for another reason than a closed pipe (a full disk)."""


def _emit(text: str) -> None:
    try:
        sys.stdout.write(text)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _OutputError(exc.strerror or str(exc)) from None


def _json_line(rec: RecordedFrame, ev: Event | None, why: str) -> str:
    # No RecursionError here: decode refuses a frame nested deeper than schema.MAX_DEPTH.
    return json.dumps(frame_json(rec, ev, why), allow_nan=False)


def _text_line(rec: RecordedFrame, ev: Event | None, why: str, first_ns: int) -> str:
    at = f"{(rec.log_time_ns - first_ns) / 1e9:+.3f}s"
    if ev is None:
        return safe(f"{at} {rec.topic} {UNDECODABLE} {len(rec.data)} bytes {rec.data[:16].hex()}: {why}")
    return safe(f"{at} {ev.src} {ev.kind} seq={ev.seq} {frame_summary(ev)}")


def _dump(reader: RecordingReader, ns: argparse.Namespace) -> None:
    kinds = {k for group in ns.kind for k in group} if ns.kind else None
    match = source_matcher(ns.source) if ns.source else None
    first_ns: int | None = None
    since_ns: int | None = None
    for rec in reader:
        if first_ns is None:
            first_ns = rec.log_time_ns
            since_ns = ns.since.threshold(first_ns) if ns.since else None
        if since_ns is not None and rec.log_time_ns < since_ns:
            continue
        try:
            ev: Event | None = decode(rec.data)
            why = ""
        except DecodeError as exc:
            ev, why = None, str(exc)
        if kinds is not None:
            word = UNDECODABLE if ev is None else (ev.kind if ev.kind in KINDS else UNKNOWN)
            if word not in kinds:
                continue
        if match is not None and not match(rec.topic if ev is None else ev.src):
            continue
        _emit((_json_line(rec, ev, why) if ns.json else _text_line(rec, ev, why, first_ns)) + "\n")
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _OutputError(exc.strerror or str(exc)) from None


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    from eagle3_top.tracer.reader.recording.writer import PROFILE

    from .recording_input import READ_ERRORS, read_error

    reader = RecordingReader(ns.file)
    try:
        _dump(reader, ns)
    except BrokenPipeError:
        quiet_stdout()
        return EXIT_OK
    except _OutputError as exc:
        return fail(PROG, f"writing the output: {exc}")
    except READ_ERRORS as exc:
        return fail(PROG, read_error(ns.file, exc))
    rep = reader.report
    problems = rep.describe()
    if rep.profile != PROFILE:
        problems.insert(0, f"not an eagle3-top recording (profile '{rep.profile}'): its frames do not decode")
    for line in problems:
        print(f"{PROG}: {safe(ns.file)}: {safe(line)}", file=sys.stderr)
    return EXIT_OK if rep.complete else EXIT_PARTIAL
