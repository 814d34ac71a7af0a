"""``eagle3-top manifest build|show``: the training manifest, built from what training left behind."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from .report import EXIT_OK, fail, parse

PROG = "eagle3-top manifest"


def _count(lo: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"expected at least {lo}, got {n}")
        return n

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Build or show a training manifest.")
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
    b.add_argument("--max-files", type=_count(1), help="sample this many files, evenly spread")
    b.add_argument("--probes", type=_count(0), default=4, help="training samples to keep as probes")
    b.add_argument("--out", "-o", required=True, metavar="M", help="manifest JSON to write")
    s = sub.add_parser("show", help="print a manifest for a person")
    s.add_argument("manifest")
    return p


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    return show(ns.manifest) if ns.action == "show" else build(ns)


def show(path: str) -> int:
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest

    from .manifest_text import manifest_text

    try:
        m = load_manifest(path)
    except ManifestError as exc:
        return fail("eagle3-top", str(exc))
    print(manifest_text(m))
    return EXIT_OK


def build(ns: argparse.Namespace) -> int:
    from eagle3_top.tracer.analysis.manifest import ManifestError, write_manifest
    from eagle3_top.tracer.analysis.manifest_build import build_manifest
    from eagle3_top.tracer.analysis.trainfiles import TrainFileError
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    out_dir = os.path.dirname(os.path.abspath(ns.out))
    if os.path.isdir(ns.out) or not os.path.isdir(out_dir):  # before reading for an hour, not after
        why = "is a directory" if os.path.isdir(ns.out) else f"no such directory {out_dir}"
        return fail("eagle3-top", f"--out {ns.out}: {why}")
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
        return fail("eagle3-top", f"manifest build needs torch to read training files: {exc}")
    except (ManifestError, TrainFileError) as exc:
        return fail("eagle3-top", str(exc))
    ref = manifest.reference
    print(f"wrote {ns.out}: {ref.files} files, {ref.tokens} tokens, layers {manifest.concat_order}")
    return EXIT_OK
