"""Tracer on vs paused in one SGLang server: decode tokens/s in ABBA order, paired ratios, a 95% interval.

usage: ab_overhead.py PORT PAUSE_FILE SERVER_LOG OUT.json [--bs 1] [--ntok 1024] [--rounds 24]
                      [--vocab 905] [--deadline EPOCH_S]

One long-lived client (no process start per run). Round r runs the tracer recording (T) and paused
(P, ``EAGLE3_TOP_PAUSE_FILE`` present: the tracer records nothing, its hooks stay in place) back to
back, T first in even rounds and P first in odd ones, so a drift in the machine's speed hits both
arms alike; each round gives one ratio T/P. The pause file is switched between runs, with a wait
longer than the tracer's check interval (0.5 s), never inside a timed run. Reported: the median of
the paired ratios with a distribution-free 95% interval (order statistics of the binomial), the
arms' medians, and SGLang's own decode log (``gen throughput`` and ``accept len`` every
``--decode-log-interval`` iterations) cut to the seconds that lie wholly inside one arm's runs, as
the scheduler's per-iteration time, tracer on against paused.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import statistics
import time
import urllib.request
from typing import Any

LOG = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\] Decode batch.*?#running-req: (\d+).*?"
    r"accept len: ([\d.]+).*?gen throughput \(token/s\): ([\d.]+)"
)


def post(port: int, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(req, timeout=300).read())


def run(port: int, bs: int, ntok: int, vocab: int = 905) -> tuple[float, float, float]:
    """(tokens/s, start, end): one batch of ``bs`` greedy requests of ``ntok`` new tokens; prompt
    ids from 5 to ``vocab`` - 1."""
    prompts = [[(7 * i + 3 * j) % (vocab - 5) + 5 for j in range(12 + i % 5)] for i in range(bs)]
    body = {
        "input_ids": prompts if bs > 1 else prompts[0],
        "sampling_params": {"max_new_tokens": ntok, "temperature": 0, "ignore_eos": True},
    }
    t0, w0 = time.perf_counter(), time.time()
    r = post(port, body)
    secs, w1 = time.perf_counter() - t0, time.time()
    toks = sum(x["meta_info"]["completion_tokens"] for x in (r if isinstance(r, list) else [r]))
    return toks / secs, w0, w1


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: the k-th smallest and k-th largest values, k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2."""
    s, n = sorted(xs), len(xs)
    tail, k, cum = (1 - level) / 2, 0, 0.0
    while k < n:
        p = math.comb(n, k) / 2**n
        if cum + p > tail:
            break
        cum += p
        k += 1
    k = max(k, 1)
    return s[k - 1], s[n - k]


def log_per_arm(path: str, windows: list[tuple[str, float, float]]) -> dict[str, Any]:
    """SGLang's decode log lines whose second lies wholly inside one arm's run."""
    # a line is printed at the end of its interval (--decode-log-interval iterations, well under
    # a quarter of a second here): one stamped second s belongs to an arm when [s - 0.25, s + 1) lies in a run
    secs: dict[int, str] = {}
    for arm, w0, w1 in windows:
        for s in range(math.ceil(w0 + 0.25), math.floor(w1)):
            secs[s] = arm
    per: dict[str, list[tuple[float, float]]] = {"T": [], "P": []}
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError as exc:
        return {"error": str(exc)}
    for line in lines:
        m = LOG.match(line)
        if not m:
            continue
        sec = int(dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp())
        arm = secs.get(sec)
        if arm is None:
            continue
        acc, tput = float(m.group(3)), float(m.group(4))
        if tput > 0:
            per[arm].append((tput, acc))
    out: dict[str, Any] = {}
    for arm, vals in per.items():
        if vals:
            out[arm] = {
                "lines": len(vals),
                "gen_throughput": round(statistics.median(v[0] for v in vals), 1),
                "accept_len": round(statistics.median(v[1] for v in vals), 3),
            }
    if "T" in out and "P" in out:
        # same batch, same accept length: the time per iteration is inversely their throughput
        out["iteration_ratio_T_over_P"] = round(out["P"]["gen_throughput"] / out["T"]["gen_throughput"], 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("pause_file")
    ap.add_argument("server_log")
    ap.add_argument("out")
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--ntok", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--switch-wait", type=float, default=0.7)
    ap.add_argument("--vocab", type=int, default=905, help="the target's vocabulary size")
    ap.add_argument(
        "--deadline", type=float, default=None, help="Unix time: no round starts that would end after it"
    )
    ns = ap.parse_args()

    def arm_run(arm: str) -> tuple[float, float, float]:
        if arm == "P":
            open(ns.pause_file, "w").close()
        elif os.path.exists(ns.pause_file):
            os.unlink(ns.pause_file)
        time.sleep(ns.switch_wait)
        return run(ns.port, ns.bs, ns.ntok, ns.vocab)

    for _ in range(2):
        run(ns.port, ns.bs, max(ns.ntok // 4, 16), ns.vocab)  # warm-up
    rows, windows, ratios = [], [], []
    took = 0.0  # the longest round so far
    for r in range(ns.rounds):
        if ns.deadline is not None and r >= 2 and time.time() + took > ns.deadline:
            break  # fewer pairs, reported as such, rather than a call cut off mid-round
        t_round = time.time()
        got = {}
        for arm in ("T", "P") if r % 2 == 0 else ("P", "T"):
            tok_s, w0, w1 = arm_run(arm)
            got[arm] = tok_s
            rows.append({"round": r, "arm": arm, "tok_s": round(tok_s, 2), "start": w0, "end": w1})
            windows.append((arm, w0, w1))
        ratios.append(got["T"] / got["P"])
        took = max(took, time.time() - t_round)
    if os.path.exists(ns.pause_file):
        os.unlink(ns.pause_file)
    lo, hi = median_interval(ratios)
    t = [x["tok_s"] for x in rows if x["arm"] == "T"]
    p = [x["tok_s"] for x in rows if x["arm"] == "P"]
    res = {
        "bs": ns.bs,
        "ntok": ns.ntok,
        "pairs": len(ratios),
        "median_ratio": round(statistics.median(ratios), 4),
        "ci95": [round(lo, 4), round(hi, 4)],
        "T_median_tok_s": round(statistics.median(t), 1),
        "P_median_tok_s": round(statistics.median(p), 1),
        "T_range": [round(min(t)), round(max(t))],
        "P_range": [round(min(p)), round(max(p))],
        "ratios": [round(x, 4) for x in ratios],
        "sglang_log": log_per_arm(ns.server_log, windows),
        "runs": rows,
    }
    with open(ns.out, "w") as f:
        json.dump(res, f, indent=1)
    lg = res["sglang_log"]
    print(
        f"batch {ns.bs}: tracer on / paused = {res['median_ratio']:.4f} (95% interval {lo:.4f} - {hi:.4f}, "
        f"{len(ratios)} ABBA pairs); tok/s on {res['T_median_tok_s']:.0f} {res['T_range']}, paused "
        f"{res['P_median_tok_s']:.0f} {res['P_range']}; SGLang's log: per-iteration time on/paused "
        f"{lg.get('iteration_ratio_T_over_P', 'n/a')} ({lg.get('T', {}).get('lines', 0)} / {lg.get('P', {}).get('lines', 0)} lines)"
    )


if __name__ == "__main__":
    main()
