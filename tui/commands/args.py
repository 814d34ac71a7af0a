"""Argument checks shared by the commands: every value is validated up front, each bad one gets
one line naming it, and a bad endpoint among good ones is reported and skipped."""

from __future__ import annotations

import difflib

from eagle3_top.tracer.argtypes import positive_float as positive_float
from eagle3_top.tracer.argtypes import positive_int as positive_int
from eagle3_top.tracer.schema import printable

# every command's endpoint parsing (ranges expanded), re-exported: the library's feed reads files too
from eagle3_top.tracer.transport.endpoints import endpoint_error as endpoint_error
from eagle3_top.tracer.transport.endpoints import endpoint_list as endpoint_list

COMMANDS = (
    "check",
    "preflight",
    "manifest",
    "probe",
    "toy",
    "keys",
    "demo",
    "record",
    "dump",
    "recording",
    "serve-web",
    "export",
    "relay",
)


def looks_like_endpoint(text: str) -> bool:
    """Endpoint-shaped (a scheme, or HOST:PORT), even if invalid: a word without either is more
    likely a mistyped command."""
    return "://" in text or ":" in text


def unknown_command(word: str) -> str:
    """The one-line complaint for a word that is neither a command nor endpoint-shaped (the live
    monitor would take it as an endpoint and wait forever)."""
    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; commands: {', '.join(COMMANDS)}"
    return f"eagle3-top: '{printable(word, 80)}' is not a command nor an endpoint (tcp://HOST:PORT){hint}"
