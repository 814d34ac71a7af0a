"""``eagle3-top check``: watch a stream and judge it, for a deploy pipeline.
Exit 0 clean, 1 on an error finding, 2 on usage, input or connection problems (one line on stderr)."""

from __future__ import annotations

import argparse
import sys

from .curve_args import add_curve_arguments, curve_from
from .report import EXIT_FINDINGS, EXIT_OK, fail, parse, print_findings, print_json

PROG = "eagle3-top check"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Watch a stream and judge it; exit 0 clean, 1 on an error finding, 2 on usage or connection problems.",
    )
    p.add_argument("endpoints", nargs="+", metavar="ENDPOINT")
    p.add_argument(
        "--manifest", metavar="M", help="training manifest (without it, only server-side checks run)"
    )
    p.add_argument("--json", action="store_true", help="print findings as a JSON list")
    p.add_argument("--steps", type=int, default=50, help="verify steps to watch per source (default 50)")
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the evidence (default 30)"
    )
    add_curve_arguments(p)
    return p


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    from eagle3_top.tracer.analysis.check import NoStream, watch
    from eagle3_top.tracer.analysis.findings import has_errors
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.curve import KeyError_

    try:
        curve = curve_from(ns)
        manifest = load_manifest(ns.manifest) if ns.manifest else None
    except (KeyError_, ManifestError) as exc:
        return fail("eagle3-top", str(exc))
    try:
        result = watch(ns.endpoints, manifest, steps=ns.steps, timeout=ns.timeout, curve=curve)
    except NoStream as exc:
        return fail("eagle3-top", str(exc))
    except Exception as exc:  # a bad endpoint string, say
        return fail("eagle3-top", f"check failed: {type(exc).__name__}: {exc}")
    if ns.json:
        print_json(result.findings)
    else:
        print_findings(result.findings)
        if not result.findings:
            print(f"ok: no findings on {len(result.sources)} source(s) after {result.waited_s:.1f}s")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_FINDINGS if has_errors(result.findings) else EXIT_OK
