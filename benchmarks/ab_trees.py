"""Benchmarks of two trees of this repository alternated on one box: the working tree against an
earlier commit, each benchmark run in its own interpreter, A B B A ... so that a neighbour's load
falls on both alike. Each tree runs its own copy of the benchmark (its own imports), and the figures
each benchmark's ``main()`` returns are compared as medians.

    python -m benchmarks.ab_trees --base b4dd55a [--rounds 4] [--bench encode ingest publisher manifest serving_path]

The base tree is checked out (``git worktree``) under a temporary directory and put first on
``PYTHONPATH`` through a package shim (``eagle3_top`` -> its ``tracer/``, ``tui/``, ``hooks/``), so the
editable install of the working tree does not shadow it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import machine

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("encode", "ingest", "publisher", "manifest", "serving_path")
ARGS = {"manifest": ["--files", "2000"], "serving_path": ["--quick"]}
RUN = """
import json, sys, contextlib, io
sys.argv = ["bench"]
from benchmarks import bench_{name} as b
out = io.StringIO()
with contextlib.redirect_stdout(out):
    got = b.main({args!r}) if {args!r} else b.main()
print("@@AB@@" + json.dumps(got if isinstance(got, dict) else {{}}, default=float))
"""


def _tree(base: str, where: Path) -> Path:
    wt = where / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(wt), base], check=True)
    shim = where / "shim" / "eagle3_top"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    for pkg in ("tracer", "tui", "hooks"):
        (shim / pkg).symlink_to(wt / pkg)
    return wt


def _run(tree: Path, shim: Path | None, name: str) -> dict[str, float]:
    env = dict(os.environ)
    if shim is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), str(tree), env.get("PYTHONPATH")) if p)
    code = RUN.format(name=name, args=ARGS.get(name, []))
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench_{name} failed in {tree}:\n{out.stderr[-2000:]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("@@AB@@"))
    return _numbers(json.loads(line[6:]))


def _numbers(d: object, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a benchmark's result, nested keys joined with dots."""
    out: dict[str, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_numbers(v, f"{prefix}{k}."))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        out[prefix[:-1]] = float(d)
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, tuple[float, float]]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the earlier commit")
    ap.add_argument("--rounds", type=int, default=4, help="A B B A pairs (default 4)")
    ap.add_argument("--bench", nargs="+", default=list(DEFAULT))
    ns = ap.parse_args(argv)
    result: dict[str, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="e3t-ab-") as tmp:
        where = Path(tmp)
        base = _tree(ns.base, where)
        try:
            print(f"# ab_trees: the working tree against {ns.base}, {ns.rounds} ABBA rounds, on {machine()}")
            for name in ns.bench:
                runs: dict[str, list[dict[str, float]]] = {"new": [], "base": []}
                for r in range(ns.rounds):
                    order = ("new", "base") if r % 2 == 0 else ("base", "new")
                    for which in order:
                        tree, shim = (ROOT, None) if which == "new" else (base, where / "shim")
                        runs[which].append(_run(tree, shim, name))
                keys = sorted(set(runs["new"][0]) & set(runs["base"][0]))
                result[name] = {}
                for k in keys:
                    new = statistics.median(x[k] for x in runs["new"])
                    old = statistics.median(x[k] for x in runs["base"])
                    result[name][k] = (old, new)
                    ratio = new / old if old else float("nan")
                    print(
                        f"  bench_{name:<13} {k:<28} base {old:12.4g}   new {new:12.4g}   new/base {ratio:5.2f}"
                    )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    return result


if __name__ == "__main__":
    main()
