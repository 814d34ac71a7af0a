"""Markdown table rows from run_shapes.sh's ab_<shape>_bs<B>.json files (ab_overhead.py's output).

usage: shapes_report.py AB_JSON...

One row per file, ordered by shape as given and batch: pairs, the arms' median tokens/s, the median
of the paired ratios T/P with its 95% interval, and SGLang's own decode log: the per-iteration time
ratio T/P with how many log lines each arm had (no lines: the runs were shorter than its interval).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

NAME = re.compile(r"^ab_(?P<shape>.+)_bs(?P<bs>\d+)\.json$")
HEADER = (
    "| shape | batch | pairs | tok/s traced | tok/s paused | traced / paused (95% interval) "
    "| SGLang log: iteration time traced / paused (lines T / P) |\n|---|---|---|---|---|---|---|"
)


def row(shape: str, res: dict[str, Any]) -> str:
    lo, hi = res["ci95"]
    lg = res.get("sglang_log") or {}
    it = lg.get("iteration_ratio_T_over_P")
    lines = f"{lg.get('T', {}).get('lines', 0)} / {lg.get('P', {}).get('lines', 0)}"
    log = (
        f"{it:.4f} ({lines})"
        if it is not None
        else f"n/a ({lines}{'; ' + lg['error'] if 'error' in lg else ''})"
    )
    return (
        f"| {shape} | {res['bs']} | {res['pairs']} | {res['T_median_tok_s']:.0f} | {res['P_median_tok_s']:.0f} "
        f"| {res['median_ratio']:.4f} ({lo:.4f} – {hi:.4f}) | {log} |"
    )


def main(paths: list[str]) -> int:
    rows: list[tuple[int, int, str]] = []
    order: dict[str, int] = {}
    for p in paths:
        m = NAME.match(Path(p).name)
        if m is None:
            print(f"shapes_report.py: {p}: not an ab_<shape>_bs<B>.json name", file=sys.stderr)
            continue
        try:
            res = json.loads(Path(p).read_text())
        except (OSError, ValueError) as exc:  # a run cut off mid-write: say so, keep the others
            print(f"shapes_report.py: {p}: {exc}", file=sys.stderr)
            continue
        shape = m.group("shape")
        rows.append((order.setdefault(shape, len(order)), int(m.group("bs")), row(shape, res)))
    if not rows:
        print("no ab results")
        return 1
    print(HEADER)
    for _, _, text in sorted(rows):
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
