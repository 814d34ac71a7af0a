"""How the headless commands (`check`, `probe`, `manifest`) read their flags and print findings,
progress and failures, and what their exit codes mean."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO

from eagle3_top.tracer.analysis.findings import Finding
from eagle3_top.tracer.schema import printable

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """The flags, or the exit code when argparse has already answered (usage error 2, --help 0)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK


def safe(text: str) -> str:
    """A string that came from the wire or a file, made safe for the terminal."""
    return printable(text, 2000)


def fail(command: str, msg: str) -> int:
    """One line on stderr, exit code 2: usage, input or connection problems."""
    print(f"{command}: {safe(msg)}", file=sys.stderr)
    return EXIT_USAGE


def print_json(findings: Iterable[Finding]) -> None:
    print(json.dumps([f.to_json() for f in findings], indent=1))


def finding_lines(findings: Iterable[Finding]) -> list[str]:
    return [
        f"{f.severity.upper():7s} {f.code} [{safe(f.source)}]: {safe(f.message)}\n        fix: {safe(f.fix)}"
        for f in findings
    ]


def print_findings(findings: Iterable[Finding]) -> None:
    for line in finding_lines(findings):
        print(line)


class Progress:
    """One line of progress on stderr, rewritten in place; silent when stderr is not a terminal
    (a CI log gets the verdict only), and at most a few times a second."""

    def __init__(self, command: str, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.command = command
        self.live = self.stream.isatty()
        self._shown = False
        self._last = 0.0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if not self.live or now - self._last < 0.2:
            return
        self._last = now
        text = f"{self.command}: {safe(line)}"
        cols = shutil.get_terminal_size((100, 20)).columns - 1  # a wrapped line cannot be rewritten
        if len(text) > cols:
            text = text[: max(cols - 1, 10)] + "…"
        self.stream.write(f"\r\x1b[2K{text}")
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False


@contextmanager
def stderr_progress(command: str) -> Iterator[Progress]:
    p = Progress(command)
    try:
        yield p
    finally:
        p.clear()


def quiet_stdout() -> None:
    """After a closed pipe (``| head``), point stdout at /dev/null: the interpreter's last flush at
    exit would otherwise print a BrokenPipeError of its own."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor behind stdout (a test's capture)
        pass
