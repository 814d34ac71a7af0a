"""How the headless commands (`check`, `probe`, `manifest`) read their flags and print findings and
failures, and what their exit codes mean."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from eagle3_top.tracer.analysis.findings import Finding

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """The flags, or the exit code when argparse has already answered (usage error 2, --help 0)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK


def fail(command: str, msg: str) -> int:
    """One line on stderr, exit code 2: usage, input or connection problems."""
    print(f"{command}: {msg}", file=sys.stderr)
    return EXIT_USAGE


def print_json(findings: Iterable[Finding]) -> None:
    print(json.dumps([f.to_json() for f in findings], indent=1))


def print_findings(findings: Iterable[Finding]) -> None:
    for f in findings:
        print(f"{f.severity.upper():7s} {f.code} [{f.source}]: {f.message}\n        fix: {f.fix}")
