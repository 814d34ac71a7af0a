"""``eagle3-top serve-web [--host H] [--port P] [--public] [MONITOR ARGS ...]``: the monitor in a
browser, through textual-serve. Each browser tab gets a monitor process of its own, the real one
(``python -m eagle3_top.tui.cli MONITOR ARGS``), drawing through Textual's web driver."""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import shlex
import socket
import sys
from typing import TYPE_CHECKING

from .listen import port_arg, public_host_error, resolve
from .monitor_check import argparse_error, monitor_args_error
from .report import EXIT_OK, fail

if TYPE_CHECKING:
    from .web_server import MonitorServer

PROG = "eagle3-top serve-web"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8557  # next to the tracer's 5557, away from the 8000 that model servers take


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: a monitor flag must never be taken for a prefix of one of ours.
    p = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        usage=f"{PROG} [--host H] [--port P] [--public] [MONITOR ARGS ...]",
        description="The live monitor (or --replay FILE) in a browser: every other argument is the "
        "monitor's, as `eagle3-top --help` lists them. Each browser tab runs a monitor of its own.",
        epilog="There is no authentication: keep the default loopback host and reach it from "
        f"another machine through an SSH tunnel (ssh -N -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} HOST).",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument("--port", type=port_arg, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument(
        "--public",
        action="store_true",
        help="allow a --host that is not loopback: anyone who reaches the port gets the monitor",
    )
    return p


def main(argv: list[str]) -> int:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, monitor_args = build_parser().parse_known_args(argv)
    except SystemExit as exc:
        if exc.code:
            return fail(PROG, argparse_error(err.getvalue()))
        return EXIT_OK  # --help, already printed
    why, warnings = monitor_args_error(monitor_args)
    for line in warnings:
        print(f"{PROG}: {line}", file=sys.stderr)
    if why is not None:
        return fail(PROG, why)
    addresses = resolve(ns.host)
    why = public_host_error(
        PROG,
        ns.host,
        addresses,
        ns.public,
        "the browser view",
        f", or tunnel: ssh -N -L {ns.port}:127.0.0.1:{ns.port} HOST",
    )
    if why is not None:
        return fail(PROG, why)
    busy = _port_busy(addresses, ns.port)
    if busy is not None:
        return fail(PROG, busy)
    # exec: the shell textual-serve runs it in becomes the monitor, so a kill reaches the monitor.
    command = "exec " + shlex.join([sys.executable, "-m", "eagle3_top.tui.cli", *monitor_args])
    try:
        _server(command, ns.host, ns.port).serve()
    except OSError as exc:  # the port taken between our check and the server's bind
        return fail(PROG, f"{ns.host}:{ns.port}: {exc.strerror or exc}")
    return EXIT_OK


def _port_busy(addresses: list[str], port: int) -> str | None:
    """Why the server could not bind ``port`` on every address, or None. Bound the way the server
    binds (SO_REUSEADDR), so a port in TIME_WAIT is free here as it is there."""
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return f"port {port} on {address} is in use; choose another with --port"
                return f"{address}:{port}: {exc.strerror or exc}"
    return None


def _server(command: str, host: str, port: int) -> MonitorServer:
    from .web_server import MonitorServer

    # The page tells the browser where its websocket is: a wildcard address is no place to go.
    name = socket.gethostname() if host in ("0.0.0.0", "::") else host
    url = f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"
    return MonitorServer(
        command, host=host, port=port, public_url=url, banner=f"{PROG}: open {url} (Ctrl+C stops)"
    )
