"""Where a command that serves HTTP (``serve-web``, ``export``) may listen: the addresses a
``--host`` names, and whether all of them are loopback (anything else needs ``--public``)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys


def resolve(host: str) -> list[str]:
    """Every address ``host`` names, sorted; empty when it names none."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _port(text: str, lowest: int) -> int:
    if not text.isdigit() or not lowest <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port, {lowest}-65535")
    return int(text)


def port_arg(text: str) -> int:
    """A ``--port`` to listen on: 1-65535."""
    return _port(text, 1)


def port_or_any(text: str) -> int:
    """A port to listen on, where 0 asks the kernel for any free one."""
    return _port(text, 0)


def public_host_error(
    prog: str, host: str, addresses: list[str], public: bool, what: str, hint: str = ""
) -> str | None:
    """Why ``--host`` (which names ``addresses``, from ``resolve``) must not be listened on, or
    None. ``what`` (``/metrics``, ``the browser view``) has no authentication, so a host others can
    reach needs ``--public``, and then a warning; ``hint`` ends the refusal (a tunnel that avoids it)."""
    if not addresses:
        return f"--host {host!r}: no such address"
    if all(loopback(a) for a in addresses):
        return None
    if not public:
        return (
            f"--host {host} is reachable from other machines and {what} has no authentication; "
            f"add --public to serve it anyway{hint}"
        )
    print(f"{prog}: warning: serving {what} on {host} without authentication", file=sys.stderr)
    return None
