"""How the headless commands (`check`, `probe`) print findings and failures."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from eagle3_top.tracer.analysis.findings import Finding

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def fail(command: str, msg: str) -> int:
    """One line on stderr, exit code 2: usage, input or connection problems."""
    print(f"{command}: {msg}", file=sys.stderr)
    return EXIT_USAGE


def print_json(findings: Iterable[Finding]) -> None:
    print(json.dumps([f.to_json() for f in findings], indent=1))


def print_findings(findings: Iterable[Finding]) -> None:
    for f in findings:
        print(f"{f.severity.upper():7s} {f.code} [{f.source}]: {f.message}\n        fix: {f.fix}")
