"""The CURVE client flags every subscribing command takes (``live``, ``check``, ``probe``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eagle3_top.tracer.curve import CurveClient


def add_curve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--curve-server-key", metavar="FILE", help="the publisher's public certificate (CURVE)")
    p.add_argument("--curve-client-secret", metavar="FILE", help="our .key_secret certificate (CURVE)")


def curve_from(ns: argparse.Namespace) -> CurveClient | None:
    """Raises tracer.curve.KeyError_ (one line) for a bad or half-given pair."""
    from eagle3_top.tracer import curve

    if not ns.curve_server_key and not ns.curve_client_secret:
        return None
    if not (ns.curve_server_key and ns.curve_client_secret):
        raise curve.KeyError_("CURVE needs both --curve-server-key and --curve-client-secret")
    return curve.client(ns.curve_server_key, ns.curve_client_secret)
