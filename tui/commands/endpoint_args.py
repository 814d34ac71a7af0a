"""The endpoint arguments every subscribing command takes: ENDPOINT ... (port ranges expand, one
endpoint per port) and ``--endpoints-file F`` (one a line). Bad ones are named on stderr and
skipped; the rest are used."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from eagle3_top.tracer.reader.endpoints_file import EndpointsFile, EndpointsFileError
from eagle3_top.tracer.transport.endpoints import MAX_RANGE_PORTS

from .args import endpoint_list
from .report import fail

ENDPOINT_HELP = (
    "tcp://HOST:PORT, HOST:PORT (tcp), ipc://PATH, or a port range tcp://HOST:FIRST-LAST "
    f"(one endpoint per port, as SGLang numbers ranks; at most {MAX_RANGE_PORTS})"
)
FILE_HELP = "endpoints (or ranges) one a line, # comments; a bad line is named and skipped"


def add_endpoint_arguments(p: argparse.ArgumentParser, *, follows: bool) -> None:
    """``follows``: the command re-reads the file when it changes; else it reads it once."""
    p.add_argument("endpoints", nargs="*", metavar="ENDPOINT", help=ENDPOINT_HELP)
    when = (
        "re-read when it changes (endpoints added are connected, removed disconnected; a file that "
        "vanishes keeps the endpoints)"
        if follows
        else "read once, at start"
    )
    p.add_argument("--endpoints-file", metavar="F", help=f"{FILE_HELP}; {when}")


@dataclass
class Endpoints:
    given: list[str]  # on the command line (or the default)
    file: EndpointsFile | None

    @property
    def all(self) -> list[str]:
        """Both, each once."""
        extra = self.file.endpoints if self.file is not None else []
        return self.given + [ep for ep in extra if ep not in self.given]


def endpoints_from(ns: argparse.Namespace, prog: str, default: list[str] | None = None) -> Endpoints | int:
    """The command line's endpoints (``default`` when it names none and gives no file) and the
    file's, loaded; every bad one printed, "(skipped)". Or, said in one line, the exit status of a
    command that has none: the file is unreadable, or no endpoint is valid."""
    texts = ns.endpoints or ([] if ns.endpoints_file or default is None else default)
    given, bad = endpoint_list(texts)
    file = None
    if ns.endpoints_file:
        file = EndpointsFile(ns.endpoints_file)
        try:
            file.load()
        except EndpointsFileError as exc:
            return fail(prog, f"--endpoints-file {exc}")
        bad += file.bad
    for msg in bad:
        print(f"{prog}: {msg} (skipped)", file=sys.stderr)
    got = Endpoints(given, file)
    if not got.all:
        return fail(prog, "no valid endpoint" if texts or file else "give an ENDPOINT or --endpoints-file F")
    return got
