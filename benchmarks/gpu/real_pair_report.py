"""The table of run_real_pair.sh: SGLang's own figures beside our stream's, and each case judged
against what it must show.

usage: real_pair_report.py DIR     (DIR: run_real_pair.sh's results; prints markdown, exit 1 if a
                                    case fell short)

Per case: preflight's exit code and codes (before any server), whether the server came up, SGLang's
accept length (meta_info: sum of completion_tokens / sum of spec_verify_ct over the workload's
requests) against the built-in engine's on the same prompts, the stream's accept length over the
same requests (a plain pyzmq recorder: accepted + 1 per step row), whether the per-request
histograms equal meta_info's spec_accept_histogram, check's and probe's exit codes and codes, and
the probe matrix's diagonal.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# What each case must show. accept: ("within", draft, 0.05) = within 5% of the built-in engine's
# accept length with that draft; ("below", x) = under x. Codes: every one listed must appear.
EXPECT: dict[str, dict[str, Any]] = {
    "H": {
        "what": "healthy: draft-no-embed, ids [0, 2, 5]",
        "preflight_rc": 0, "check_rc": 0, "probe_rc": 0, "probe_codes": ["PROBE_OK"], "diagonal": 0.99,
        "accept": ("within", "draft-no-embed", 0.05),
    },
    "N": {
        "what": "ids not read (the motivating bug)",
        "preflight_rc": 1, "preflight_codes": ["LAYER_IDS_NOT_READ"],
        "check_rc": 1, "check_codes": ["LAYER_IDS_NOT_READ", "ACCEPTANCE_BELOW_TRAINING"],
        "probe_rc": 1, "probe_codes": ["PROBE_MISMATCH"], "accept": ("below", 1.5),
    },
    "NN": {
        "what": "ids not read, default layers happen to work",
        "preflight_rc": 1, "preflight_codes": ["LAYER_IDS_NOT_READ"],
        "check_rc": 1, "check_codes": ["LAYER_IDS_NOT_READ"],
        "accept": ("within", "draft-no-embed-ids-not-read", 0.05),
    },
    "R": {
        "what": "flag rewrite: steps 1, 16 draft tokens",
        "preflight_codes": ["SPEC_PARAM_REWRITTEN"], "check_codes": ["SPEC_PARAM_REWRITTEN"],
    },
    "EL": {  # the crash, reported from inside the dying scheduler, names the defect predicted
        "what": "embedding slot (ids [-1, 2, 5]) on Llama",
        "preflight_rc": 1, "preflight_codes": ["ENGINE_KNOWN_DEFECT"],
        "check_rc": 1, "check_codes": ["ENGINE_FAILED"], "server": "died",
    },
    "EQ": {
        "what": "embedding slot (ids [-1, 2, 5]) on Qwen2",
        "preflight_rc": 1, "preflight_codes": ["ENGINE_KNOWN_DEFECT"],
        "check_rc": 1, "check_codes": ["ENGINE_KNOWN_DEFECT", "AUX_STATS_DRIFT"],
        "probe_rc": 1, "probe_codes": ["PROBE_MISMATCH"],
    },
    "QH": {
        "what": "the Qwen2 target, healthy draft (control)",
        "preflight_rc": 0, "check_rc": 0, "probe_rc": 0, "probe_codes": ["PROBE_OK"], "diagonal": 0.99,
        "accept": ("within", "draft-no-embed", 0.05),
    },
}  # fmt: skip


def load(d: str, name: str) -> Any:
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rc(d: str, name: str) -> int | None:
    try:
        with open(os.path.join(d, name)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def codes(findings: Any) -> list[str]:
    fs = findings.get("findings") if isinstance(findings, dict) else findings
    return sorted({f["code"] for f in fs or [] if isinstance(f, dict) and "code" in f})


def stream_vs_sglang(events: Any, client: Any) -> tuple[float | None, int, int]:
    """The stream's accept length over the workload's requests, and how many requests' step
    histograms equal SGLang's own, of how many."""
    if not events or not client or not client.get("requests"):
        return None, 0, 0
    rows, tokens, steps, same = events.get("rows", {}), 0, 0, 0
    for r in client["requests"]:
        mi, got = r["meta_info"], rows.get(r["rid"], [])
        hist = list(mi.get("spec_accept_histogram") or [])
        h = [0] * max(len(hist), max(got, default=-1) + 1)
        for a in got:
            h[a] += 1
        same += h == hist + [0] * (len(h) - len(hist))
        tokens += sum(a + 1 for a in got)
        steps += len(got)
    return (tokens / steps if steps else None), same, len(client["requests"])


def diagonal(probe: Any) -> float | None:
    for f in probe or []:
        m = (f.get("evidence") or {}).get("matrix") if isinstance(f, dict) else None
        if m:
            return min(m[i][i] for i in range(min(len(m), len(m[0]))))
    return None


def judge(tag: str, row: dict[str, Any], built_in: dict[str, float]) -> list[str]:
    want, short = EXPECT[tag], []
    if row["server"] != want.get("server", "up"):
        short.append(f"server {row['server']}, want {want.get('server', 'up')}")
    for k in ("preflight", "check", "probe"):
        if f"{k}_rc" in want and row[f"{k}_rc"] != want[f"{k}_rc"]:
            short.append(f"{k} exit {row[f'{k}_rc']}, want {want[f'{k}_rc']}")
        missing = set(want.get(f"{k}_codes", [])) - set(row[f"{k}_codes"])
        if missing:
            short.append(f"{k} lacks {', '.join(sorted(missing))}")
    acc = row["sglang_accept"]
    if "accept" in want:
        kind, *arg = want["accept"]
        if acc is None:
            short.append("no accept length from SGLang")
        elif kind == "within" and abs(acc / built_in[arg[0]] - 1) > arg[1]:
            short.append(f"accept {acc:.3f} not within {arg[1]:.0%} of built-in {built_in[arg[0]]:.3f}")
        elif kind == "below" and acc >= arg[0]:
            short.append(f"accept {acc:.3f}, want below {arg[0]}")
    if "diagonal" in want and (row["diagonal"] is None or row["diagonal"] < want["diagonal"]):
        short.append(f"probe diagonal {row['diagonal']}, want >= {want['diagonal']}")
    return short


def fmt(v: Any, spec: str = ".3f") -> str:
    return "—" if v is None else format(v, spec)


def main(d: str) -> int:
    work = load(d, "workload.json") or {}
    built_in = work.get("built_in_accept_length", {})
    cases = [line.split() for line in open(os.path.join(d, "cases.txt")) if line.strip()]
    ready = (
        dict(line.split(" ", 1) for line in open(os.path.join(d, "ready.txt")) if " " in line)
        if os.path.exists(os.path.join(d, "ready.txt"))
        else {}
    )
    print(
        "| case | served | preflight | server | SGLang accept (meta_info) | built-in | stream accept | "
        "histograms = meta_info | check | probe | probe diagonal | agrees with built-in (leading tokens) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    failed = 0
    notes = []
    for tag, tgt, drf, st, tk, nd, _man in cases:
        client = load(d, f"client_{tag}.json") or {}
        summ = client.get("summary") or {}
        stream_acc, same, n = stream_vs_sglang(load(d, f"events_{tag}.json"), client)
        probe = load(d, f"probe_{tag}.json")
        row = {
            "preflight_rc": rc(d, f"preflight_{tag}.rc"),
            "preflight_codes": codes(load(d, f"preflight_{tag}.json")),
            "check_rc": rc(d, f"check_{tag}.rc"),
            "check_codes": codes(load(d, f"check_{tag}.json")),
            "probe_rc": rc(d, f"probe_{tag}.rc"),
            "probe_codes": codes(probe),
            "sglang_accept": summ.get("accept_length"),
            "diagonal": diagonal(probe),
        }
        up = (ready.get(tag, "").split() or ["?"])[0].replace("ready=1", "up").replace("ready=0", "died")
        row["server"] = up
        short = judge(tag, row, built_in)
        failed += bool(short)
        served = f"{tgt} + {drf}, steps {st} topk {tk} ndt {nd}"
        agree = (
            f"{summ['prompts_identical_to_built_in']}/{summ['requests']} prompts, "
            f"{summ['leading_tokens_agreeing']}/{summ['leading_tokens_of']}"
            if summ
            else "—"
        )
        print(
            f"| {tag} {EXPECT[tag]['what']} | {served} | {row['preflight_rc']} {' '.join(row['preflight_codes'])} "
            f"| {up} | {fmt(row['sglang_accept'])} | {fmt(built_in.get(drf))} | {fmt(stream_acc)} | {same}/{n} "
            f"| {row['check_rc']} {' '.join(row['check_codes'])} | {fmt(row['probe_rc'], 'd')} "
            f"{' '.join(row['probe_codes'])} | {fmt(row['diagonal'])} | {agree} |"
        )
        notes.append(f"- {tag}: " + ("as expected" if not short else "SHORT: " + "; ".join(short)))
        if client.get("error"):
            notes.append(f"  client: {client['error']}")
    print()
    print("\n".join(notes))
    print(f"\n{len(cases) - failed} of {len(cases)} cases as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
