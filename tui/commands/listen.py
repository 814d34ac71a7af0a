"""Where a command that serves HTTP (``serve-web``, ``export``) may listen: the addresses a
``--host`` names, and whether all of them are loopback (anything else needs ``--public``)."""

from __future__ import annotations

import ipaddress
import socket


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
