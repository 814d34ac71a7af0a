"""A monitor command line checked before another process runs it: ``serve-web`` starts one monitor
per browser tab, where a mistake would only show as a tab that closes. The monitor's own checks
run here, and each complaint is said in one line before anything binds."""

from __future__ import annotations

import contextlib
import io

from . import live
from .report import EXIT_OK, parse

PREFIX = "eagle3-top: "


def argparse_error(text: str) -> str:
    """argparse's complaint without its usage block: the last line, less "PROG: error: "."""
    lines = text.strip().splitlines()
    return lines[-1].split("error: ", 1)[-1] if lines else "bad arguments"


def monitor_args_error(argv: list[str]) -> tuple[str | None, list[str]]:
    """Why ``eagle3-top ARGV`` would not open the monitor's screen (None when it would), and the
    warnings it prints on the way (an endpoint skipped)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        ns = parse(live.build_parser(), argv)
    if isinstance(ns, int):
        return argparse_error(err.getvalue()), []
    if ns.once or ns.json or ns.version:
        return "the browser shows the live screen; --once, --json and --version print without one", []
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = live.main(argv, check_only=True)
    lines = [line.removeprefix(PREFIX) for line in err.getvalue().splitlines()]
    if code != EXIT_OK:
        return (lines[-1] if lines else f"the monitor's arguments were refused (exit {code})"), lines[:-1]
    return None, lines
