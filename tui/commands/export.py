"""``eagle3-top export --prometheus PORT ENDPOINT ...``: the monitor's evidence as Prometheus
metrics, headless. It subscribes like the monitor (the same ledger, evidence book and findings
engine, in a lean feed of its own: ``eagle3_top.tracer.export``) and answers ``GET /metrics`` on
127.0.0.1:PORT; the metrics are read from the feed at scrape time."""

from __future__ import annotations

import argparse
import errno
import sys

from eagle3_top.tracer.transport.curve_flags import add_client_arguments as add_curve_arguments
from eagle3_top.tracer.transport.curve_flags import client_from as curve_from

from .endpoint_args import add_endpoint_arguments, endpoints_from
from .listen import port_or_any, public_host_error, resolve
from .report import EXIT_OK, fail, parse
from .stop_signal import StopSignal

PROG = "eagle3-top export"
DEFAULT_HOST = "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve what the monitor sees as Prometheus metrics on http://HOST:PORT/metrics.",
        epilog="Metrics and their PromQL: README, 'Prometheus and Grafana'. There is no "
        "authentication: keep the loopback host and let a Prometheus on this machine scrape it.",
    )
    add_endpoint_arguments(p, follows=True)
    p.add_argument(
        "--prometheus",
        type=port_or_any,
        required=True,
        metavar="PORT",
        help="port for /metrics (0: any free one)",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument(
        "--public", action="store_true", help="allow a --host that is not loopback (no authentication)"
    )
    p.add_argument("--manifest", metavar="M", help="training manifest: the findings judge against it")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="config file whose [thresholds] and [requests] apply (default: $EAGLE3_TOP_CONFIG, else "
        "~/.config/eagle3-top/config.toml if present)",
    )
    add_curve_arguments(p)
    return p


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    given = endpoints_from(ns, PROG)
    if isinstance(given, int):
        return given
    why = public_host_error(PROG, ns.host, resolve(ns.host), ns.public, "/metrics")
    if why is not None:
        return fail(PROG, why)

    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.export.exporter import Exporter, settle_heap
    from eagle3_top.tracer.export.feed import RCVHWM, ExportFeed
    from eagle3_top.tracer.reader.subscriber import Subscriber
    from eagle3_top.tracer.transport.curve import KeyError_
    from eagle3_top.tui.config import ConfigError, load_config

    try:
        curve = curve_from(ns)
        manifest = load_manifest(ns.manifest) if ns.manifest else None
        cfg = load_config(ns.config)
    except (KeyError_, ManifestError, ConfigError) as exc:
        return fail(PROG, str(exc))
    feed = ExportFeed(
        given.given,
        manifest=manifest,
        subscriber_factory=lambda eps: Subscriber(eps, curve=curve, rcvhwm=RCVHWM),
        stale_after_s=cfg.thresholds.stale_after_s,
        thresholds=cfg.thresholds,
    )
    if given.file is not None:
        feed.follow_endpoints_file(given.file)
    exp = Exporter(feed, ns.host, ns.prometheus)
    try:
        exp.start()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return fail(
                PROG, f"port {ns.prometheus} on {ns.host} is in use; choose another with --prometheus"
            )
        return fail(PROG, f"{ns.host}:{ns.prometheus}: {exc.strerror or exc}")
    try:
        if not feed.running:
            return fail(PROG, feed.error or "the receive worker did not start")
        settle_heap()
        n = len(feed.endpoints)
        print(f"{PROG}: serving {exp.url} for {n} endpoint(s) (Ctrl+C stops)", file=sys.stderr)
        stop = StopSignal()
        while not stop.wait(0.5):
            pass
    finally:
        exp.close()
    return EXIT_OK
