"""Argument checks shared by the commands: every value is validated up front, each bad one gets
one line naming it, and a bad endpoint among good ones is reported and skipped."""

from __future__ import annotations

import argparse
import difflib
import math
import re

from eagle3_top.tracer.schema import printable

COMMANDS = ("check", "manifest", "probe", "toy", "keys", "demo", "record", "dump", "recording", "serve-web")

# tcp://HOST:PORT (HOST a name, an IPv4 address or a bracketed IPv6 one), HOST:PORT, ipc://PATH.
_TCP = re.compile(r"^(?:tcp://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]+)$")


def endpoint_error(text: str) -> str | None:
    """Why ``text`` is not an endpoint we can connect to, or None when it is one."""
    if text.startswith("ipc://"):
        return None if len(text) > len("ipc://") else f"{text!r}: ipc:// needs a path"
    if "://" in text and not text.startswith("tcp://"):
        return f"{text!r}: unsupported transport (use tcp://HOST:PORT or ipc://PATH)"
    m = _TCP.match(text)
    if m is None:
        return f"{text!r}: not an endpoint (tcp://HOST:PORT, HOST:PORT or ipc://PATH)"
    port = int(m.group("port"))
    if not 1 <= port <= 65535:
        return f"{text!r}: port {port} is outside 1-65535"
    return None


def looks_like_endpoint(text: str) -> bool:
    """Endpoint-shaped (a scheme, or HOST:PORT), even if invalid: a word without either is more
    likely a mistyped command."""
    return "://" in text or ":" in text


def endpoint_list(texts: list[str]) -> tuple[list[str], list[str]]:
    """The valid endpoints (tcp:// added where it was left out), and one message per bad one."""
    good: list[str] = []
    bad: list[str] = []
    for t in texts:
        why = endpoint_error(t)
        if why is not None:
            bad.append(why)
        elif t.startswith(("tcp://", "ipc://")):
            good.append(t)
        else:
            good.append(f"tcp://{t}")
    return good, bad


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return v


def unknown_command(word: str) -> str:
    """The one-line complaint for a word that is neither a command nor endpoint-shaped (the live
    monitor would take it as an endpoint and wait forever)."""
    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; commands: {', '.join(COMMANDS)}"
    return f"eagle3-top: '{printable(word, 80)}' is not a command nor an endpoint (tcp://HOST:PORT){hint}"
