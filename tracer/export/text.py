"""/metrics over HTTP: Prometheus's text format (0.0.4), written line by line, served by a threading
WSGI server.

Why not prometheus_client's ``generate_latest``: it validates every label name and escapes every
label value of every sample, and a scrape shares the GIL with the feed's receive thread, which
doubles or triples what it costs under load (docs/performance.md). Our names are valid by
construction and a source's label set is escaped once per scrape (``collector``); values are
formatted as prometheus_client formats them, so the text is the same. The tests read it with
prometheus_client's own parser.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TYPES = {"info": "gauge"}  # a family's type -> the one the text format knows
SAMPLE_SUFFIX = {"counter": "_total", "info": "_info"}  # a family's name -> its samples'


def escape(v: str) -> str:
    """A label value as the text format writes it."""
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return v


def count(n: int) -> str:
    """An integer as prometheus_client writes it (``floatToGoString``: 5.0, 1.234567e+06)."""
    return f"{n}.0" if 0 <= n < 1_000_000 else floatToGoString(n)


def number(x: float) -> str:
    return floatToGoString(x)


class Family:
    """One metric family of one scrape: its HELP and TYPE lines, then its samples' lines."""

    __slots__ = ("name", "sample", "head", "lines")

    def __init__(self, name: str, kind: str, doc: str) -> None:
        self.name = name
        self.sample = name + SAMPLE_SUFFIX.get(kind, "")
        doc = doc.replace("\\", r"\\").replace("\n", r"\n")
        self.head = f"# HELP {self.sample} {doc}\n# TYPE {self.sample} {_TYPES.get(kind, kind)}\n"
        self.lines: list[str] = []

    def add(self, labels: str, value: str, suffix: str | None = None) -> None:
        """``labels``: ``k="v",...`` already escaped (empty: none); ``suffix``: the sample's name
        after the family's (a histogram's _bucket, _count, _sum), else the family's own."""
        name = self.sample if suffix is None else self.name + suffix
        self.lines.append(f"{name}{{{labels}}} {value}\n" if labels else f"{name} {value}\n")

    def text(self) -> str:
        return self.head + "".join(self.lines)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No line per scrape on stderr."""


def _app(render: Callable[[], bytes]) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        if environ.get("PATH_INFO") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return iter([b"eagle3-top export: /metrics\n"])
        body = render()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return iter([body])

    return app


def serve(render: Callable[[], bytes], host: str, port: int) -> WSGIServer:
    """``render``: the whole of /metrics, per request. Bound (OSError when it cannot be), not yet
    serving: call ``serve_forever`` on a thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    return make_server(host, port, _app(render), server_class, handler_class=_Quiet)
