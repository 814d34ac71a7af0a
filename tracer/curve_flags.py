"""The CURVE server settings as every publishing command spells them: ``--curve-secret``,
``--curve-clients``, ``--curve-any-client``, each with the environment twin the SGLang plugin reads
(``EAGLE3_TOP_CURVE_SECRET`` ...). A flag wins over its twin, so a fleet's keys can be set once
in the environment and one command can still be pointed elsewhere."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # zmq stays unimported until a key is used: the plugin reads these names at startup
    from .curve import CurveServer

ENV_SECRET = "EAGLE3_TOP_CURVE_SECRET"  # .key_secret certificate: publish CURVE-encrypted
ENV_CLIENTS = "EAGLE3_TOP_CURVE_CLIENTS"  # directory of admitted client certificates
ENV_ANY_CLIENT = "EAGLE3_TOP_CURVE_ANY_CLIENT"  # =1: encrypt, but admit any client


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--curve-secret",
        metavar="FILE",
        help=f"serve CURVE-encrypted with this .key_secret certificate (or ${ENV_SECRET})",
    )
    p.add_argument(
        "--curve-clients",
        metavar="DIR",
        help=f"with --curve-secret: admit only the client certificates (*.key) in DIR (or ${ENV_CLIENTS})",
    )
    p.add_argument(
        "--curve-any-client",
        action="store_true",
        help="with --curve-secret and no --curve-clients: encrypt, but admit any client that knows "
        f"the server's public key (or ${ENV_ANY_CLIENT}=1)",
    )


def server_from_env() -> CurveServer | None:
    """The environment's settings alone (the plugin has no command line); raises ``KeyError_``."""
    from .curve import ServerNames, server_config

    return server_config(
        os.environ.get(ENV_SECRET) or None,
        os.environ.get(ENV_CLIENTS) or None,
        os.environ.get(ENV_ANY_CLIENT) == "1",
        ServerNames(ENV_SECRET, ENV_CLIENTS, f"{ENV_ANY_CLIENT}=1"),
    )


def server_from(ns: argparse.Namespace) -> CurveServer | None:
    """The flags of ``add_server_arguments``, each falling back on its twin; raises ``KeyError_``
    (one line, naming flags when any flag was given, else the variables)."""
    from .curve import FLAGS, server_config

    flagged = bool(ns.curve_secret or ns.curve_clients or ns.curve_any_client)
    if not flagged:
        return server_from_env()
    return server_config(
        ns.curve_secret or os.environ.get(ENV_SECRET) or None,
        ns.curve_clients or (None if ns.curve_any_client else os.environ.get(ENV_CLIENTS) or None),
        ns.curve_any_client or (not ns.curve_clients and os.environ.get(ENV_ANY_CLIENT) == "1"),
        FLAGS,
    )
