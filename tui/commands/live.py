"""``eagle3-top [--manifest M] [ENDPOINT ...]``: the live monitor."""

from __future__ import annotations

import argparse
import os
import sys

from eagle3_top.tracer.transport.curve_flags import add_client_arguments as add_curve_arguments
from eagle3_top.tracer.transport.curve_flags import client_from as curve_from

from .args import looks_like_endpoint, positive_float, unknown_command
from .endpoint_args import add_endpoint_arguments, endpoints_from
from .report import EXIT_OK, EXIT_USAGE, fail, parse, safe

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"


def build_parser(usage: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eagle3-top", usage=usage, description="Live monitor for EAGLE-3 speculative decoding."
    )
    add_endpoint_arguments(p, follows=True)
    p.add_argument("--manifest", metavar="M", help="training manifest to diagnose against")
    p.add_argument(
        "--replay",
        metavar="FILE",
        help="show a recording (eagle3-top record, or r in the monitor) instead of a live stream",
    )
    p.add_argument(
        "--speed",
        type=speed_arg,
        default=1.0,
        metavar="X",
        help="replay speed, 0.25 to 100, or max (default 1); + and - change it while playing",
    )
    p.add_argument(
        "--follow", action="store_true", help="replay a file that is still being written, and keep up"
    )
    p.add_argument("--record-dir", metavar="DIR", help="where r writes its recordings (default: here)")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="config file (TOML; default $EAGLE3_TOP_CONFIG, else ~/.config/eagle3-top/config.toml "
        "if present): defaults for these flags, [thresholds], theme; a flag beats the file",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot and exit, no screen: after listening one interval (default 1 s), "
        "or at the end of --replay FILE; exit 0, or 3 when no source was heard",
    )
    p.add_argument(
        "--baseline-tok-s",
        type=positive_float,
        metavar="X",
        help="the same server's tok/s without speculation, at the same load: shows the speed-up, the "
        "break-even accept length, and a finding when speculation is slower",
    )
    p.add_argument(
        "--baseline-from",
        metavar="FILE",
        help="take that baseline from a recording of the same server run without speculation (its "
        "committed tokens/s), instead of --baseline-tok-s",
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json (or a model directory holding one) to show tokens as text; by default "
        "each source's own, when its model directory is on this machine (needs eagle3-top[text])",
    )
    p.add_argument(
        "--json", action="store_true", help="the snapshot as JSON (docs/snapshot.md); implies --once"
    )
    p.add_argument(
        "-i",
        "--interval",
        type=interval_arg,
        metavar="S",
        help="seconds between screen refreshes (default 1; a replay 0.25); with --once, how long to listen (Ctrl-C or SIGTERM ends it early and prints)",
    )
    add_curve_arguments(p)
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def main(argv: list[str], usage: str | None = None, check_only: bool = False) -> int:
    """``check_only``: every check, then EXIT_OK instead of the screen (serve-web checks first)."""
    ns = parse(build_parser(usage), argv)
    if isinstance(ns, int):
        return ns
    if ns.version:
        from eagle3_top.tracer import __version__

        print(__version__)
        return EXIT_OK
    ns.once = ns.once or ns.json
    if ns.baseline_from is not None and ns.baseline_tok_s is not None:
        return fail("eagle3-top", "give --baseline-from FILE or --baseline-tok-s X, not both")
    why = _apply_config(ns)
    if why is not None:
        return fail("eagle3-top", why)
    if ns.baseline_from is not None:
        why = _measure_baseline(ns)
        if why is not None:
            return fail("eagle3-top", why)
    if ns.tokenizer is not None:
        from eagle3_top.tui.token_text import TokenizerError, TokenText

        try:
            ns.tokenizer = TokenText.load(ns.tokenizer)
        except TokenizerError as exc:
            return fail("eagle3-top", f"--tokenizer {exc}")
    if ns.replay is not None:
        return _replay(ns, check_only)
    if ns.follow or ns.speed != 1.0:
        return fail("eagle3-top", "--speed and --follow go with --replay FILE")
    for word in ns.endpoints:
        if not looks_like_endpoint(word):
            print(unknown_command(word), file=sys.stderr)
            return EXIT_USAGE
    given = endpoints_from(ns, "eagle3-top", [DEFAULT_ENDPOINT])
    if isinstance(given, int):
        return given
    endpoints = given.all
    if not ns.once and not check_only and not _terminal():
        return fail(
            "eagle3-top",
            "the live monitor needs a terminal (stdin and stdout); for one snapshot without one, "
            "run `eagle3-top --once`, for a verdict `eagle3-top check ENDPOINT`",
        )
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.transport.curve import KeyError_

    try:
        manifest = load_manifest(ns.manifest) if ns.manifest else None
        curve = curve_from(ns)
    except (ManifestError, KeyError_) as exc:
        return fail("eagle3-top", str(exc))
    if ns.once:
        from .once import ONCE_INTERVAL_S, once_live

        return once_live(
            endpoints,
            manifest,
            curve,
            ns.interval or ONCE_INTERVAL_S,
            ns.json,
            ns.baseline_tok_s,
            ns.tokenizer,
        )
    if check_only:
        return EXIT_OK
    from eagle3_top.tui.app import Eagle3TopApp
    from eagle3_top.tui.config import LIVE_INTERVAL_S

    _watch_server()
    app = Eagle3TopApp(
        given.given,
        manifest=manifest,
        curve=curve,
        record_dir=ns.record_dir,
        refresh_hz=1.0 / (ns.interval or LIVE_INTERVAL_S),
        baseline_tok_s=ns.baseline_tok_s,
        tokenizer=ns.tokenizer,
        config=ns.cfg,
    )
    if given.file is not None:
        app.feed.follow_endpoints_file(given.file)
    app.run()
    return EXIT_OK


# A repaint of a busy screen is the monitor's main cost next to the server it watches: at one a
# second it takes 3.7% of a core tailing 100 step events/s, 8.4% at four (benchmarks/bench_tui_cpu.py).
# -i is how long --once listens (up to a day: a script's whole benchmark) or, on a screen, the
# refresh period (at most a minute: a monitor that redraws less often looks dead).
MIN_INTERVAL_S, MAX_INTERVAL_S, MAX_REFRESH_S = 0.05, 86_400.0, 60.0


def interval_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not MIN_INTERVAL_S <= v <= MAX_INTERVAL_S:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"{text!r}: seconds between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g}"
        )
    return v


def speed_arg(text: str) -> float | None:
    from eagle3_top.tracer.reader.replay import parse_speed

    try:
        return parse_speed(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# What textual-serve (`eagle3-top serve-web`) sets for the monitor it starts for a browser tab.
WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


def _apply_config(ns: argparse.Namespace) -> str | None:
    """Fill what the command line left out from the config file (flags beat the file)."""
    from eagle3_top.tui.config import ConfigError, load_config

    try:
        cfg = load_config(ns.config)
    except ConfigError as exc:
        return str(exc)
    if not ns.endpoints_file:  # the command line's file beats the config's endpoints
        ns.endpoints = ns.endpoints or list(cfg.endpoints)
    ns.manifest = ns.manifest or cfg.manifest
    ns.interval = ns.interval or cfg.interval
    if ns.interval and ns.interval > MAX_REFRESH_S and not (ns.once or ns.json):
        return f"-i {ns.interval:g}: a screen refreshes at least every {MAX_REFRESH_S:g} s (longer only with --once)"
    ns.baseline_tok_s = ns.baseline_tok_s or cfg.baseline_tok_s
    ns.record_dir = ns.record_dir or cfg.record_dir or "."
    if ns.tokenizer is None and cfg.tokenizer is not None:
        ns.tokenizer = cfg.tokenizer
    ns.cfg = cfg
    return None


def _measure_baseline(ns: argparse.Namespace) -> str | None:
    """``--baseline-from FILE`` measured into ``ns.baseline_tok_s`` (it beats a config file's
    baseline), said on stderr; or why the file gives none."""
    from eagle3_top.tracer.analysis.baseline import BaselineError, baseline_from_recording

    try:
        baseline = baseline_from_recording(ns.baseline_from)
    except BaselineError as exc:
        return str(exc)
    ns.baseline_tok_s = baseline.tok_s
    print(f"eagle3-top: {safe(baseline.describe(ns.baseline_from))}", file=sys.stderr)
    return None


def _watch_server() -> None:
    if os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER:
        from .parent_watch import exit_with_parent

        exit_with_parent()


def _terminal() -> bool:
    # Drawing into a pipe or a CI log would hang the job and fill the log with escapes; the one pipe
    # that is a screen is textual-serve's, which the web driver draws into for a browser.
    return (sys.stdout.isatty() and sys.stdin.isatty()) or os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER


def _replay(ns: argparse.Namespace, check_only: bool = False) -> int:
    if ns.endpoints or ns.endpoints_file:
        return fail("eagle3-top", "--replay shows a file; give no endpoint with it")
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.reader.replay import Timeline

    try:
        manifest = load_manifest(ns.manifest) if ns.manifest else None
        timeline = Timeline(ns.replay, speed=ns.speed, follow=ns.follow)
    except ManifestError as exc:
        return fail("eagle3-top", str(exc))
    except ValueError as exc:  # not a recording, or one of a newer format: the reader's one line
        return fail("eagle3-top", str(exc))
    except OSError as exc:
        return fail("eagle3-top", f"{ns.replay}: {exc.strerror or exc}")
    if not timeline.frames and not ns.follow:
        return fail("eagle3-top", f"{ns.replay}: the recording holds no frames")
    if ns.once:
        if ns.follow:
            return fail("eagle3-top", "--once reads the file as it stands; give no --follow with it")
        from .once import once_replay

        return once_replay(timeline, manifest, ns.json, ns.baseline_tok_s, ns.tokenizer)
    if check_only:
        return EXIT_OK
    if not _terminal():
        return fail(
            "eagle3-top",
            "the replay needs a terminal (stdin and stdout); for a verdict without one, "
            "run `eagle3-top check --replay FILE`",
        )
    from eagle3_top.tui.config import REPLAY_INTERVAL_S
    from eagle3_top.tui.replay_app import run_replay

    _watch_server()
    run_replay(
        timeline,
        manifest=manifest,
        refresh_hz=1.0 / (ns.interval or REPLAY_INTERVAL_S),
        baseline_tok_s=ns.baseline_tok_s,
        tokenizer=ns.tokenizer,
        config=ns.cfg,
    )
    return EXIT_OK
