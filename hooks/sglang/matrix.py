"""Maintainer command: the defect matrix, observed on every supported SGLang release, written where
``preflight`` and ``check`` read it (``tracer/engines/sglang/observed.json``).

Each release runs in a child interpreter of its own (``python -m eagle3_top.hooks.sglang.observe
--matrix``) with that release's code first on ``PYTHONPATH`` (an overlay directory made by
``.ci/sglang-overlay.sh``; the release installed in this interpreter needs none). Nothing is typed
in: the table is what the releases' own classes did.

    python -m eagle3_top.hooks.sglang.matrix --release 0.5.23= --release 0.5.17=.venv/sglang-0.5.17 ...
    make sglang-matrix          # every release in tracer/engines/sglang/versions.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from eagle3_top.tracer.engines.sglang import defects

KEEP = ("sglang_version", "architecture", "model_class", "num_layers", "hidden_size", "case", "ids", "ids_read",
        "use_aux", "native", "setup_error", "forward_error", "slots")  # fmt: skip
SLOT_KEEP = ("holds", "intended", "shares_storage_with_later_modified")


def observe_release(overlay: str | None, config_dir: str | None) -> list[dict[str, Any]]:
    """The matrix of one release: a child interpreter with ``overlay`` first on its path."""
    env = dict(os.environ)
    if overlay:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(overlay), env.get("PYTHONPATH")) if p)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    argv = [sys.executable, "-m", "eagle3_top.hooks.sglang.observe", "--matrix"]
    if config_dir:
        argv += ["--config-dir", config_dir]
    out = subprocess.run(argv, stdout=subprocess.PIPE, env=env, check=True, text=True)
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def compact(row: dict[str, Any]) -> dict[str, Any]:
    """What the table keeps of an observation (timings and progress notes are not facts)."""
    out = {k: row.get(k) for k in KEEP}
    if isinstance(row.get("slots"), list):
        out["slots"] = [{k: s.get(k) for k in SLOT_KEEP} for s in row["slots"]]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eagle3_top.hooks.sglang.matrix", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--release",
        action="append",
        required=True,
        metavar="VERSION=OVERLAY",
        help="a release and the directory holding its code (empty: the one installed here); repeatable",
    )
    p.add_argument("--config-dir", help="published target/draft configs to base the tiny targets on")
    p.add_argument("-o", "--output", default=defects.OBSERVED_FILE, help="where to write the table")
    ns = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for spec in ns.release:
        version, _, overlay = spec.partition("=")
        print(f"== SGLang {version}", file=sys.stderr, flush=True)
        got = observe_release(overlay or None, ns.config_dir)
        seen = {r.get("sglang_version") for r in got}
        if seen != {version}:
            print(
                f"matrix: asked for SGLang {version}, the child ran {sorted(map(str, seen))}", file=sys.stderr
            )
            return 2
        rows.extend(compact(r) for r in got)
    table = {
        "generated": {
            "by": "python -m eagle3_top.hooks.sglang.matrix "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "on": datetime.date.today().isoformat(),
            "releases": [s.partition("=")[0] for s in ns.release],
            "cases": {k: v for k, v in defects.CASES.items()},
        },
        "observations": rows,
    }
    with open(ns.output, "w") as f:
        json.dump(table, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"matrix: {len(rows)} observations written to {ns.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
