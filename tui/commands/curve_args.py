"""The CURVE client flags every subscribing command takes (``live``, ``check``, ``probe``,
``record``, ``relay``, ``export``). Each flag has an environment twin named like the plugin's
(``--curve-server-key`` / ``EAGLE3_TOP_CURVE_SERVER_KEY``): one way of naming keys everywhere, and
a fleet's keys set once in the environment rather than on every command line. A flag wins."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eagle3_top.tracer.curve import CurveClient

ENV_SERVER_KEY = "EAGLE3_TOP_CURVE_SERVER_KEY"
ENV_CLIENT_SECRET = "EAGLE3_TOP_CURVE_CLIENT_SECRET"


def add_curve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--curve-server-key",
        metavar="FILE",
        help=f"the publisher's public certificate (CURVE; or ${ENV_SERVER_KEY})",
    )
    p.add_argument(
        "--curve-client-secret",
        metavar="FILE",
        help=f"our .key_secret certificate (CURVE; or ${ENV_CLIENT_SECRET})",
    )


def curve_from(ns: argparse.Namespace) -> CurveClient | None:
    """Raises tracer.curve.KeyError_ (one line) for a bad or half-given pair."""
    from eagle3_top.tracer import curve

    server_key = ns.curve_server_key or os.environ.get(ENV_SERVER_KEY) or None
    client_secret = ns.curve_client_secret or os.environ.get(ENV_CLIENT_SECRET) or None
    if not server_key and not client_secret:
        return None
    if not (server_key and client_secret):
        raise curve.KeyError_(
            "CURVE needs both --curve-server-key and --curve-client-secret "
            f"(or ${ENV_SERVER_KEY} and ${ENV_CLIENT_SECRET})"
        )
    return curve.client(server_key, client_secret)
