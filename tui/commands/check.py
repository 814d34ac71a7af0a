"""``eagle3-top check``: watch a stream and judge it, for a deploy pipeline.

Exit codes (also in ``--help`` and the README): 0 enough evidence and no error finding; 1 an error
finding (a crashed engine among them); 2 usage, input or connection problems (one line on stderr);
3 partial evidence: no error seen, but some source showed less than is needed to pass."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from eagle3_top.tracer.transport.curve_flags import add_client_arguments as add_curve_arguments
from eagle3_top.tracer.transport.curve_flags import client_from as curve_from

from .args import positive_float, positive_int
from .endpoint_args import add_endpoint_arguments, endpoints_from
from .report import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_PARTIAL,
    fail,
    finding_lines,
    parse,
    safe,
    stderr_progress,
)

if TYPE_CHECKING:
    from eagle3_top.tracer.analysis.check import CheckResult, SourceReport

PROG = "eagle3-top check"
EPILOG = """\
exit codes:
  0  every source showed its hello and --min-steps verify steps (and, with --manifest, enough aux
     rows; with an accept length to expect, from --manifest or the draft's own metrics, enough
     request-steps to compare it: check waits for them), and no error finding
  1  an error finding, an engine that crashed among them
  2  usage, input or connection problems: nothing was heard (one line on stderr)
  3  partial evidence: no error seen, but a source showed too little (idle, gone, unreadable
     frames, no request in its steps), or an endpoint named was never heard (it is named);
     --allow-partial turns this into 0
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Watch a stream and judge it, for a deploy pipeline.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # a gate judges a fixed set of endpoints: the file is read once
    add_endpoint_arguments(p, follows=False)
    p.add_argument(
        "--replay",
        metavar="FILE",
        help="judge a recording instead of a live stream: the verdict check would have given had it "
        "started with the recording (--timeout counts recording time)",
    )
    p.add_argument(
        "--manifest", metavar="M", help="training manifest (without it, only server-side checks run)"
    )
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    p.add_argument(
        "--steps", type=positive_int, default=50, help="verify steps to watch per source (default 50)"
    )
    p.add_argument(
        "--min-steps",
        type=positive_int,
        metavar="N",
        help="fewer verify steps than this from a source is partial evidence (default: --steps)",
    )
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="exit 0 instead of 3 on partial evidence (what was missing is still printed)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="seconds to wait for the evidence (default 30)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="config file whose [thresholds] the findings use (default: $EAGLE3_TOP_CONFIG, else "
        "~/.config/eagle3-top/config.toml if present)",
    )
    add_curve_arguments(p)
    return p


def _fmt_positions(vals: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in vals[:8]) + (" …" if len(vals) > 8 else "") if vals else "—"


def source_lines(r: SourceReport) -> list[str]:
    accept = "—" if r.accept_length is None else f"{r.accept_length:.2f}"
    if r.expected_accept_length is not None:
        accept += f" (expected {r.expected_accept_length:.2f} by {r.expected_by})"
    lines = [
        f"source {safe(r.key)}: hello {'yes' if r.hello else 'no'}, {r.steps} verify steps, "
        f"{r.request_steps} request-steps, {r.aux_rows} aux rows, {r.malformed} malformed",
        f"  accept length {accept}",
        f"  acceptance by position (conditional): {_fmt_positions(r.conditional)}",
        f"  acceptance by position (unconditional): {_fmt_positions(r.unconditional)}",
    ]
    if r.malformed and r.last_malformed:
        lines.append(f"  last malformed: {safe(r.last_malformed)}")
    for m in r.missing:
        lines.append(f"  missing: {safe(m)}")
    return lines


def print_text(result: CheckResult, code: int, allow_partial: bool) -> None:
    for r in result.reports:
        print("\n".join(source_lines(r)))
    if result.undecodable:
        print(f"{result.undecodable} frame(s) named no source: {safe(result.last_undecodable or '')}")
    for line in result.lost:
        print(f"evidence lost: {safe(line)}")
    for line in result.unheard:
        print(f"endpoint {safe(line)}")
    if result.evictions.proven:
        print(f"evidence forgotten: {result.evictions.describe()}")
    for line in finding_lines(result.findings):
        print(line)
    n = len(result.reports)
    if code == EXIT_FINDINGS:
        errors = [f for f in result.findings if f.severity == "error"]
        on = len({f.source for f in errors})
        print(f"FAIL: {len(errors)} error finding(s) on {on} of {n} source(s) after {result.waited_s:.1f}s")
    elif result.verdict == "partial":
        short = sum(not r.complete for r in result.reports)
        tail = " (allowed by --allow-partial)" if allow_partial else ""
        print(
            f"PARTIAL: no error seen, but {short} of {n} source(s) showed too little"
            f"{' and some frames named no source' if result.undecodable else ''}"
            f"{' and part of the recording was unreadable' if result.lost else ''}"
            f"{f' and {result.evictions.proven} real source(s) were forgotten' if result.evictions.proven else ''}"
            f"{f' and {len(result.unheard)} endpoint(s) said nothing' if result.unheard else ''}{tail}"
        )
    else:
        extra = f", {len(result.findings)} warning/info finding(s)" if result.findings else ", no findings"
        print(f"ok: {n} source(s){extra}, after {result.waited_s:.1f}s")


def exit_code(result: CheckResult, allow_partial: bool) -> int:
    verdict = result.verdict
    if verdict == "findings":
        return EXIT_FINDINGS
    if verdict == "partial" and not allow_partial:
        return EXIT_PARTIAL
    return EXIT_OK


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    if ns.replay is not None and (ns.endpoints or ns.endpoints_file):
        return fail(PROG, "--replay judges a file; give no endpoint with it")
    if ns.replay is None and not (ns.endpoints or ns.endpoints_file):
        return fail(PROG, "give an ENDPOINT (or --endpoints-file F) to watch, or --replay FILE")
    endpoints: list[str] = []
    if ns.replay is None:
        given = endpoints_from(ns, PROG)
        if isinstance(given, int):
            return given
        endpoints = given.all
    from eagle3_top.tracer.analysis.check import NoStream, judge_recording, watch
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.transport.curve import KeyError_
    from eagle3_top.tui.config import ConfigError, load_config

    try:
        curve = curve_from(ns)
        manifest = load_manifest(ns.manifest) if ns.manifest else None
        thresholds = load_config(ns.config).thresholds
    except (KeyError_, ManifestError, ConfigError) as exc:
        return fail(PROG, str(exc))
    if ns.replay is not None:
        from eagle3_top.tracer.reader.recording import RecordingReader

        reader = RecordingReader(ns.replay)
        try:
            result = judge_recording(
                reader,
                manifest,
                steps=ns.steps,
                min_steps=ns.min_steps,
                timeout=ns.timeout,
                thresholds=thresholds,
            )
        except NoStream as exc:
            lost = "; ".join(reader.report.describe()[:2])
            return fail(PROG, f"{ns.replay}: {exc}" + (f" ({lost})" if lost else ""))
        except ValueError as exc:  # not a recording, or one of a newer format: the reader's one line
            return fail(PROG, str(exc))
        except OSError as exc:
            return fail(PROG, f"{ns.replay}: {exc.strerror or exc}")
        result.note_recording(reader.report)
    else:
        with stderr_progress("check") as progress:
            try:
                result = watch(
                    endpoints,
                    manifest,
                    steps=ns.steps,
                    min_steps=ns.min_steps,
                    timeout=ns.timeout,
                    curve=curve,
                    progress=progress,
                    thresholds=thresholds,
                )
            except NoStream as exc:
                progress.clear()
                return fail(PROG, str(exc))
    code = exit_code(result, ns.allow_partial)
    if ns.json:
        print(
            json.dumps(
                {
                    "verdict": result.verdict,
                    "exit_code": code,
                    "waited_s": round(result.waited_s, 3),
                    "sources": [r.to_json() for r in result.reports],
                    "undecodable_frames": result.undecodable,
                    "lost_evidence": result.lost,
                    "unheard_endpoints": result.unheard,
                    "findings": [f.to_json() for f in result.findings],
                    "notes": result.notes,
                    "evictions": dataclasses.asdict(result.evictions),
                },
                indent=1,
            )
        )
    else:
        print_text(result, code, ns.allow_partial)
    for note in result.notes:
        print(f"note: {safe(note)}", file=sys.stderr)
    return code
