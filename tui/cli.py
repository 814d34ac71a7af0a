"""Every ``eagle3-top`` subcommand. Imports stay lazy: the live UI must start without torch."""

from __future__ import annotations

import argparse
import sys

from .curve_args import add_curve_arguments, curve_from
from .report import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, fail, print_findings, print_json

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"

USAGE = """\
eagle3-top [--manifest M] [ENDPOINT ...]   live monitor (default tcp://127.0.0.1:5557)
eagle3-top check ENDPOINT --manifest M     headless verdict for a deploy pipeline (exit 0/1/2)
eagle3-top manifest build|show ...         the training manifest
eagle3-top probe --server URL --endpoint E --manifest M   replay training samples, compare aux rows
eagle3-top toy [...]                       run the built-in EAGLE-3 engine and publish its trace
eagle3-top keys DIR NAME                   write a CURVE certificate pair for remote tailing
eagle3-top demo                            two built-in engines (healthy, mis-wired) + the monitor
"""


def live_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eagle3-top", usage=USAGE, description="Live monitor for EAGLE-3 speculative decoding."
    )
    p.add_argument(
        "endpoints",
        nargs="*",
        metavar="ENDPOINT",
        help="tcp://HOST:PORT or ipc://PATH (HOST:PORT is read as tcp)",
    )
    p.add_argument("--manifest", metavar="M", help="training manifest to diagnose against")
    add_curve_arguments(p)
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def cmd_keys(argv: list[str]) -> int:
    from eagle3_top.tracer import curve

    p = argparse.ArgumentParser(
        prog="eagle3-top keys", description="Write a CURVE certificate pair (NAME.key, NAME.key_secret)."
    )
    p.add_argument("directory")
    p.add_argument("name")
    ns = p.parse_args(argv)
    public, secret = curve.generate(ns.directory, ns.name)
    print(f"public: {public}\nsecret: {secret} (keep it private)")
    return EXIT_OK


def _fail(msg: str) -> int:
    return fail("eagle3-top", msg)


def cmd_check(argv: list[str]) -> int:
    from eagle3_top.tracer.check import NoStream, watch
    from eagle3_top.tracer.diagnose import has_errors
    from eagle3_top.tracer.manifest import ManifestError, load_manifest

    p = argparse.ArgumentParser(
        prog="eagle3-top check",
        description="Watch a stream and judge it; exit 0 clean, 1 on an error finding, 2 on usage or connection problems.",
    )
    p.add_argument("endpoints", nargs="+", metavar="ENDPOINT")
    p.add_argument(
        "--manifest", metavar="M", help="training manifest (without it, only server-side checks run)"
    )
    p.add_argument("--json", action="store_true", help="print findings as a JSON list")
    p.add_argument("--steps", type=int, default=50, help="verify steps to watch per source (default 50)")
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the evidence (default 30)"
    )
    add_curve_arguments(p)
    try:
        ns = p.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    from eagle3_top.tracer.curve import KeyError_

    try:
        curve = curve_from(ns)
    except KeyError_ as exc:
        return _fail(str(exc))
    try:
        manifest = load_manifest(ns.manifest) if ns.manifest else None
    except ManifestError as exc:
        return _fail(str(exc))
    try:
        result = watch(ns.endpoints, manifest, steps=ns.steps, timeout=ns.timeout, curve=curve)
    except NoStream as exc:
        return _fail(str(exc))
    except Exception as exc:  # a bad endpoint string, say
        return _fail(f"check failed: {type(exc).__name__}: {exc}")
    if ns.json:
        print_json(result.findings)
    else:
        print_findings(result.findings)
        if not result.findings:
            print(f"ok: no findings on {len(result.sources)} source(s) after {result.waited_s:.1f}s")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_FINDINGS if has_errors(result.findings) else EXIT_OK


def cmd_manifest(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="eagle3-top manifest", description="Build or show a training manifest.")
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="build a manifest from what training left behind")
    b.add_argument("--draft", required=True, metavar="DIR", help="draft model directory (config.json, d2t)")
    b.add_argument(
        "--data",
        required=True,
        metavar="DIR",
        help="training hidden-state files (SpecForge rows_*/data_*.ckpt[.gz] or legacy .pt)",
    )
    b.add_argument("--target-config", metavar="PATH", help="target config.json or its directory")
    b.add_argument("--metrics", metavar="JSON", help="training metrics (acc_i, simulated_acc_len)")
    b.add_argument("--vocab-mapping", metavar="PT", help="SpecForge vocab_mapping.pt (d2t/t2d)")
    b.add_argument(
        "--concat-order",
        choices=["ascending", "list"],
        default="ascending",
        help="how training concatenated the aux layers: ascending (SpecForge via SGLang) or in list order (older HF trainers)",
    )
    b.add_argument("--max-files", type=int, help="sample this many files, evenly spread")
    b.add_argument("--probes", type=int, default=4, help="training samples to keep as probes")
    b.add_argument("--out", "-o", required=True, metavar="M", help="manifest JSON to write")
    s = sub.add_parser("show", help="print a manifest for a person")
    s.add_argument("manifest")
    try:
        ns = p.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    from eagle3_top.tracer.manifest import ManifestError, build_manifest, load_manifest, write_manifest
    from eagle3_top.tracer.trainfiles import TrainFileError

    if ns.action == "show":
        try:
            m = load_manifest(ns.manifest)
        except ManifestError as exc:
            return _fail(str(exc))
        from .manifest_text import manifest_text

        print(manifest_text(m))
        return EXIT_OK
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    try:
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=True,
            disable=not sys.stderr.isatty(),
        ) as bar:
            task = bar.add_task("reading training files", total=None)
            manifest = build_manifest(
                draft_dir=ns.draft, data=ns.data, target_config=ns.target_config, metrics=ns.metrics,
                vocab_mapping=ns.vocab_mapping, concat_order=ns.concat_order, max_files=ns.max_files,
                probes=ns.probes, progress=lambda i, n: bar.update(task, completed=i, total=n),
            )  # fmt: skip
        write_manifest(manifest, ns.out)
    except ImportError as exc:
        return _fail(f"manifest build needs torch to read training files: {exc}")
    except (ManifestError, TrainFileError) as exc:
        return _fail(str(exc))
    ref = manifest["reference"]
    print(
        f"wrote {ns.out}: {ref['files']} files, {ref['tokens']} tokens, layers {manifest['aux']['concat_order']}"
    )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = args[0] if args else ""
    if cmd == "toy":
        try:
            from eagle3_top.hooks.toy_main import main as toy_main
        except ImportError as exc:
            return _fail(f"the built-in engine needs torch: {exc} (pip install 'eagle3-top[torch]')")
        return toy_main(args[1:])
    if cmd == "demo":
        from .demo import main as demo_main

        return demo_main(args[1:])
    if cmd == "check":
        return cmd_check(args[1:])
    if cmd == "manifest":
        return cmd_manifest(args[1:])
    if cmd == "keys":
        return cmd_keys(args[1:])
    if cmd == "probe":
        from .probe_cmd import main as probe_main

        return probe_main(args[1:])
    ns = live_parser().parse_args(args)
    if ns.version:
        from eagle3_top.tracer import __version__

        print(__version__)
        return EXIT_OK
    manifest = None
    if ns.manifest:
        from eagle3_top.tracer.manifest import ManifestError, load_manifest

        try:
            manifest = load_manifest(ns.manifest)
        except ManifestError as exc:
            return _fail(str(exc))
    from eagle3_top.tracer.curve import KeyError_

    try:
        curve = curve_from(ns)
    except KeyError_ as exc:
        return _fail(str(exc))
    from .app import run_app

    run_app(ns.endpoints or [DEFAULT_ENDPOINT], manifest=manifest, curve=curve)
    return EXIT_OK


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
