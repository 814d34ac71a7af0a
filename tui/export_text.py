"""/metrics over HTTP: a registry's families in Prometheus's text format (0.0.4), served by a
threading WSGI server.

Why not prometheus_client's ``generate_latest``: it validates every label name and escapes every
label value of every sample, 16 ms of CPU for 64 sources (1,600 samples), and a scrape shares the
GIL with the feed's receive thread, which doubles or triples that under load (docs/performance.md).
Our collector gives every sample of a source (and position) the same label dict, so each label set
is rendered once per scrape and reused; the names are ours and valid by construction. The output
is the same format: the tests read it with prometheus_client's own parser.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
SAMPLE_SUFFIX = {"counter": "_total", "info": "_info"}  # a family's name -> its samples'


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return v


def render(metrics: Iterable[Any]) -> bytes:
    """``metrics``: prometheus_client ``Metric`` families (a registry's ``collect()``)."""
    out: list[str] = []
    # by the identity of a sample's label dict: every dict is alive (held by its sample) until the
    # end of the render, so no id is reused within it
    rendered: dict[int, str] = {}
    for m in metrics:
        name = m.name + SAMPLE_SUFFIX.get(m.type, "")
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {_TYPES.get(m.type, m.type)}\n")
        s: Sample
        for s in m.samples:
            text = rendered.get(id(s.labels))
            if text is None:
                inner = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                text = rendered[id(s.labels)] = f"{{{inner}}}" if inner else ""
            out.append(f"{s.name}{text} {floatToGoString(s.value)}\n")
    return "".join(out).encode()


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No line per scrape on stderr."""


def _app(registry: CollectorRegistry) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        if environ.get("PATH_INFO") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return iter([b"eagle3-top export: /metrics\n"])
        body = render(registry.collect())
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return iter([body])

    return app


def serve(registry: CollectorRegistry, host: str, port: int) -> WSGIServer:
    """Bound (OSError when it cannot be), not yet serving: call ``serve_forever`` on a thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    return make_server(host, port, _app(registry), server_class, handler_class=_Quiet)
