"""Every CURVE flag, declared once, with its environment twin: the server side (``--curve-secret``,
``--curve-clients``, ``--curve-any-client``; what publishing commands take and the SGLang plugin reads
from the environment alone) and the client side (``--curve-server-key``, ``--curve-client-secret``;
what subscribing commands take). A flag wins over its twin, so a fleet's keys can be set once in the
environment and one command can still be pointed elsewhere."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # zmq stays unimported until a key is used: the plugin reads these names at startup
    from eagle3_top.tracer.transport.curve import CurveClient, CurveServer


@dataclass(frozen=True)
class Flag:
    flag: str
    env: str
    metavar: str | None  # None: a switch (its twin is "=1")
    help: str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def value(self, ns: argparse.Namespace) -> str | bool | None:
        """The flag's value, else its twin's (a switch's twin counts when it is "1")."""
        given = getattr(ns, self.dest, None)
        if given:
            return given  # type: ignore[no-any-return,unused-ignore]
        if self.metavar is None:
            return os.environ.get(self.env) == "1"
        return os.environ.get(self.env) or None


SECRET = Flag("--curve-secret", "EAGLE3_TOP_CURVE_SECRET", "FILE",
              "serve CURVE-encrypted with this .key_secret certificate")  # fmt: skip
CLIENTS = Flag("--curve-clients", "EAGLE3_TOP_CURVE_CLIENTS", "DIR",
               "with --curve-secret: admit only the client certificates (*.key) in DIR")  # fmt: skip
ANY_CLIENT = Flag("--curve-any-client", "EAGLE3_TOP_CURVE_ANY_CLIENT", None,
                  "with --curve-secret and no --curve-clients: encrypt, but admit any client that "
                  "knows the server's public key")  # fmt: skip
SERVER_KEY = Flag("--curve-server-key", "EAGLE3_TOP_CURVE_SERVER_KEY", "FILE",
                  "the publisher's public certificate (CURVE)")  # fmt: skip
CLIENT_SECRET = Flag("--curve-client-secret", "EAGLE3_TOP_CURVE_CLIENT_SECRET", "FILE",
                     "our .key_secret certificate (CURVE)")  # fmt: skip
SERVER_FLAGS = (SECRET, CLIENTS, ANY_CLIENT)
CLIENT_FLAGS = (SERVER_KEY, CLIENT_SECRET)

ENV_SECRET, ENV_CLIENTS, ENV_ANY_CLIENT = SECRET.env, CLIENTS.env, ANY_CLIENT.env
ENV_SERVER_KEY, ENV_CLIENT_SECRET = SERVER_KEY.env, CLIENT_SECRET.env


def _add(p: argparse.ArgumentParser, flags: tuple[Flag, ...]) -> None:
    for f in flags:
        if f.metavar is None:
            p.add_argument(f.flag, action="store_true", help=f"{f.help} (or ${f.env}=1)")
        else:
            p.add_argument(f.flag, metavar=f.metavar, help=f"{f.help} (or ${f.env})")


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    _add(p, SERVER_FLAGS)


def add_client_arguments(p: argparse.ArgumentParser) -> None:
    _add(p, CLIENT_FLAGS)


def server_from_env() -> CurveServer | None:
    """The environment's settings alone (the plugin has no command line); raises ``KeyError_``."""
    return server_from(argparse.Namespace())


def server_from(ns: argparse.Namespace) -> CurveServer | None:
    """The server flags, each falling back on its twin; raises ``KeyError_`` (one line, naming the
    flags when any flag was given, else the variables)."""
    from eagle3_top.tracer.transport.curve import FLAGS, ServerNames, server_config

    flagged = any(getattr(ns, f.dest, None) for f in SERVER_FLAGS)
    names = FLAGS if flagged else ServerNames(ENV_SECRET, ENV_CLIENTS, f"{ENV_ANY_CLIENT}=1")
    any_flag = bool(getattr(ns, ANY_CLIENT.dest, None))
    clients_flag = getattr(ns, CLIENTS.dest, None)
    secret = SECRET.value(ns)
    # --curve-any-client on the command line overrides a directory of clients from the environment,
    # and --curve-clients one from the environment's any-client
    clients = clients_flag or (None if any_flag else CLIENTS.value(ns))
    any_client = any_flag or (not clients_flag and ANY_CLIENT.value(ns) is True)
    return server_config(
        secret if isinstance(secret, str) else None,
        clients if isinstance(clients, str) else None,
        bool(any_client),
        names,
    )


def client_from(ns: argparse.Namespace) -> CurveClient | None:
    """The client flags, each falling back on its twin; raises ``KeyError_`` (one line) for a bad or
    half-given pair."""
    from eagle3_top.tracer.transport import curve

    server_key, client_secret = SERVER_KEY.value(ns), CLIENT_SECRET.value(ns)
    if not server_key and not client_secret:
        return None
    if not (isinstance(server_key, str) and isinstance(client_secret, str)):
        raise curve.KeyError_(
            f"CURVE needs both {SERVER_KEY.flag} and {CLIENT_SECRET.flag} (or ${SERVER_KEY.env} and ${CLIENT_SECRET.env})"
        )
    return curve.client(server_key, client_secret)
