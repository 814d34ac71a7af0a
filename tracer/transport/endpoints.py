"""Endpoint text to ZeroMQ endpoints: ``tcp://HOST:PORT``, ``HOST:PORT`` (tcp), ``ipc://PATH``, and
port ranges, ``tcp://HOST:5557-5564``: one endpoint per port, as the SGLang plugin numbers ranks
(rank r on port + r). A bad one gets one line naming it; the good ones are kept."""

from __future__ import annotations

import re

# A typo such as 5557-55640 would otherwise open tens of thousands of connections, each retrying.
MAX_RANGE_PORTS = 1024

# tcp://HOST:PORT[-PORT] (HOST a name, an IPv4 address or a bracketed IPv6 one), HOST:PORT, ipc://PATH.
_TCP = re.compile(
    r"^(?:tcp://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]+)(?:-(?P<last>[0-9]+))?$"
)


def _port_error(text: str, port: int) -> str | None:
    return None if 1 <= port <= 65535 else f"{text!r}: port {port} is outside 1-65535"


def expand_endpoint(text: str) -> tuple[list[str], str | None]:
    """The endpoints ``text`` names (tcp:// added where it was left out, a range one per port), or
    no endpoint and why not."""
    if text.startswith("ipc://"):
        return ([text], None) if len(text) > len("ipc://") else ([], f"{text!r}: ipc:// needs a path")
    if "://" in text and not text.startswith("tcp://"):
        return [], f"{text!r}: unsupported transport (use tcp://HOST:PORT or ipc://PATH)"
    m = _TCP.match(text)
    if m is None:
        return (
            [],
            f"{text!r}: not an endpoint (tcp://HOST:PORT, HOST:PORT, tcp://HOST:FIRST-LAST or ipc://PATH)",
        )
    first = int(m.group("port"))
    last = first if m.group("last") is None else int(m.group("last"))
    why = _port_error(text, first) or _port_error(text, last)
    if why is not None:
        return [], why
    if last < first:
        return [], f"{text!r}: reversed port range ({first} > {last})"
    if last - first + 1 > MAX_RANGE_PORTS:
        return [], f"{text!r}: {last - first + 1} ports in a range; at most {MAX_RANGE_PORTS}"
    host = m.group("host")
    return [f"tcp://{host}:{port}" for port in range(first, last + 1)], None


def endpoint_error(text: str) -> str | None:
    """Why ``text`` is not an endpoint (or a range of them) we can connect to, or None when it is."""
    return expand_endpoint(text)[1]


def endpoint_list(texts: list[str]) -> tuple[list[str], list[str]]:
    """The valid endpoints, ranges expanded, each once in the order first named (a SUB socket
    connected twice to one publisher receives every frame twice), and one message per bad text."""
    good: dict[str, None] = {}
    bad: list[str] = []
    for t in texts:
        eps, why = expand_endpoint(t)
        if why is not None:
            bad.append(why)
        good.update(dict.fromkeys(eps))
    return list(good), bad
