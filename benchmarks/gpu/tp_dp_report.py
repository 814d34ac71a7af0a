"""The report of run_tp_dp.sh: who published where at TP 2 and DP 2, SGLang's meta_info beside the
streams, check / the fleet view / probe, and the tracer's cost at TP 2.

usage: tp_dp_report.py DIR     (DIR: run_tp_dp.sh's results; prints markdown, exit 1 if a part fell
                                short of what it must show)

Must show. TP: rank 0 publishes (hello tp {rank 0, size 2}), rank 1's port is silent; every
workload request's per-step histogram equals meta_info's spec_accept_histogram; SGLang's accept
length within 5% of the built-in engine's; check exit 0 on one source; probe PROBE_OK with a
diagonal >= 0.99. DP: one source per replica (global ranks 0 and 1, two pids), each request on
exactly one replica; per replica and merged, histograms equal meta_info's; the relay passed every
step of both; check through the relay exit 0 on two sources; the fleet view's merged accept length
within 1% of the streams'. The A/B (tracer on / paused at TP 2) is reported against the overhead
target (>= 0.99, 95% interval inside [0.98, 1.02]), not judged here.
"""

from __future__ import annotations

import sys
from typing import Any

from real_pair_report import codes, diagonal, fmt, load, rc, stream_vs_sglang


def heard(events: Any) -> str:
    if not events:
        return "no recorder output"
    kinds = events.get("kinds") or {}
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "nothing"


def src_of(events: Any) -> str | None:
    hello = (events or {}).get("hello") or {}
    return None if not hello else str(hello.get("src"))


def tp_of(events: Any) -> dict[str, Any]:
    """The hello's ``tp`` (a frame's body keys sit beside its envelope's)."""
    return ((events or {}).get("hello") or {}).get("tp") or {}


def only(client: Any, rids: set[str]) -> dict[str, Any]:
    """The client's result cut to the requests a replica served."""
    return {**client, "requests": [r for r in client.get("requests", []) if r["rid"] in rids]}


def sources(check: Any) -> int | None:
    return len(check.get("sources") or []) if isinstance(check, dict) else None


def up(d: str, tag: str) -> bool:
    try:
        with open(f"{d}/ready.txt") as f:
            return any(line.startswith(f"{tag} ready=1") for line in f)
    except OSError:
        return False


def tp_part(d: str, built_in: float | None, short: list[str]) -> list[str]:
    out = ["## TP 2 (one server over both GPUs, CUDA graphs on)", ""]
    if not up(d, "TP"):
        short.append("TP: server not up")
        return [*out, "server did not come up (server_TP.log)", ""]
    r0, r1 = load(d, "events_TP0.json"), load(d, "events_TP1.json")
    client = load(d, "client_TP.json") or {}
    acc, same, n = stream_vs_sglang(r0, client)
    sg = (client.get("summary") or {}).get("accept_length")
    check, once, probe = load(d, "check_TP.json"), load(d, "once_TP.json") or {}, load(d, "probe_TP.json")
    tp = tp_of(r0)
    out += [
        f"- rank 0's port (PUB): {heard(r0)}; source {src_of(r0)}, hello tp {tp}",
        f"- rank 1's port (PUB + 1): {heard(r1)}",
        f"- SGLang accept length (meta_info) {fmt(sg)} vs built-in {fmt(built_in)}; stream {fmt(acc)}; "
        f"histograms = meta_info: {same}/{n}",
        f"- check: exit {rc(d, 'check_TP.rc')} {' '.join(codes(check))}, sources {sources(check)}",
        f"- monitor `--once --json` on PUB..PUB+1: sources {len(once.get('sources') or [])}, endpoints "
        f"{[(e['endpoint'], e['state']) for e in once.get('endpoints') or []]}",
        f"- probe: exit {rc(d, 'probe_TP.rc')} {' '.join(codes(probe))}, diagonal {fmt(diagonal(probe))}",
    ]
    if not (r0 and (r0.get("kinds") or {}).get("step")) or tp.get("rank") != 0 or tp.get("size") != 2:
        short.append("TP: rank 0 did not publish steps with hello tp {rank 0, size 2}")
    if r1 and r1.get("kinds"):
        short.append("TP: rank 1 published (the default is rank 0 only)")
    if not n or same != n:
        short.append(f"TP: histograms equal meta_info on {same}/{n} requests")
    if sg is None or built_in is None or abs(sg / built_in - 1) > 0.05:
        short.append(f"TP: accept {fmt(sg)} not within 5% of built-in {fmt(built_in)}")
    if rc(d, "check_TP.rc") != 0 or sources(check) != 1:
        short.append(f"TP: check exit {rc(d, 'check_TP.rc')} on {sources(check)} sources, want 0 on 1")
    if rc(d, "probe_TP.rc") != 0 or (diagonal(probe) or 0) < 0.99:
        short.append(f"TP: probe exit {rc(d, 'probe_TP.rc')}, diagonal {fmt(diagonal(probe))}")
    out += [
        "",
        "Tracer on / paused, same server (ab_overhead.py: median of ABBA paired ratios, 95% interval):",
        "",
    ]
    for bs in (1, 32):
        ab = load(d, f"ab_bs{bs}.json")
        if not ab:
            out.append(f"- batch {bs}: not run")
            continue
        lo, hi = ab["ci95"]
        met = ab["median_ratio"] >= 0.99 and lo >= 0.98 and hi <= 1.02
        out.append(
            f"- batch {bs}: {ab['median_ratio']:.4f} [{lo:.4f}, {hi:.4f}] over {ab['pairs']} pairs; tok/s on "
            f"{ab['T_median_tok_s']:.0f} {ab['T_range']}, paused {ab['P_median_tok_s']:.0f} {ab['P_range']}; "
            f"SGLang log iteration time on/paused {ab['sglang_log'].get('iteration_ratio_T_over_P', 'n/a')}; "
            f"target {'met' if met else 'not met'}"
        )
    return [*out, ""]


def dp_part(d: str, short: list[str]) -> list[str]:
    out = ["## DP 2 (two replicas, TP 1 each), through the relay", ""]
    if not up(d, "DP"):
        short.append("DP: server not up")
        return [*out, "server did not come up (server_DP.log)", ""]
    reps = [load(d, f"events_DP{i}.json") or {} for i in (0, 1)]
    relay = load(d, "events_DPR.json") or {}
    client = load(d, "client_DP.json") or {}
    want = {r["rid"] for r in client.get("requests", [])}
    served = [set(rep.get("rows") or {}) & want for rep in reps]
    merged_rows: dict[str, list[int]] = {}
    for rep in reps:
        merged_rows.update(rep.get("rows") or {})
    for i, rep in enumerate(reps):
        acc, same, n = stream_vs_sglang(rep, only(client, served[i]))
        out.append(
            f"- replica {i} (PUB + {i}): {heard(rep)}; source {src_of(rep)}, hello tp {tp_of(rep)}; "
            f"{len(served[i])} workload requests, stream accept {fmt(acc)}, histograms = meta_info {same}/{n}"
        )
        if not served[i] or same != n:
            short.append(f"DP: replica {i} served {len(served[i])} requests, histograms equal on {same}/{n}")
    acc, same, n = stream_vs_sglang({"rows": merged_rows}, client)
    sg = (client.get("summary") or {}).get("accept_length")
    out.append(
        f"- merged: stream accept {fmt(acc)}, SGLang (meta_info) {fmt(sg)}, histograms = meta_info {same}/{n}"
    )
    keys = [src_of(rep) for rep in reps]
    ranks = sorted(str(k).rsplit(":", 1)[-1] for k in keys if k)
    pids = {str(k).split(":")[-2] for k in keys if k and k.count(":") >= 2}
    if ranks != ["r0", "r1"] or len(pids) != 2:
        short.append(f"DP: sources {keys}, want ranks r0 and r1 of two processes")
    if served[0] & served[1] or served[0] | served[1] != want:
        short.append("DP: the workload's requests are not split one replica each")
    if not n or same != n:
        short.append(f"DP: merged histograms equal meta_info on {same}/{n}")
    steps = [(rep.get("kinds") or {}).get("step", 0) for rep in reps]
    relayed = (relay.get("kinds") or {}).get("step", 0)
    out.append(f"- relay: {heard(relay)}; steps {relayed} vs the replicas' {steps[0]} + {steps[1]}")
    if relayed != sum(steps) or not relayed:
        short.append(f"DP: the relay passed {relayed} steps of {sum(steps)}")
    check, once = load(d, "check_DP.json"), load(d, "once_DP.json") or {}
    out.append(
        f"- check through the relay: exit {rc(d, 'check_DP.rc')} {' '.join(codes(check))}, sources {sources(check)}"
    )
    if rc(d, "check_DP.rc") != 0 or sources(check) != 2:
        short.append(f"DP: check exit {rc(d, 'check_DP.rc')} on {sources(check)} sources, want 0 on 2")
    fleet = once.get("fleet") or {}
    out.append(
        f"- fleet view (`--once --json` through the relay during the workload): sources {fleet.get('sources')}, "
        f"merged accept length {fmt(fleet.get('accept_length'))} over {fleet.get('request_steps')} request-steps, "
        f"per source {[fmt((s.get('acceptance') or {}).get('accept_length')) for s in once.get('sources') or []]}"
    )
    fa = fleet.get("accept_length")
    if fleet.get("sources") != 2 or fa is None or acc is None or abs(fa / acc - 1) > 0.01:
        short.append(f"DP: fleet view {fleet.get('sources')} sources, accept {fmt(fa)} vs streams {fmt(acc)}")
    return [*out, ""]


def main(d: str) -> int:
    built_in = ((load(d, "workload.json") or {}).get("built_in_accept_length") or {}).get("draft-no-embed")
    short: list[str] = []
    lines = ["# TP 2 and DP 2 on two GPUs, traced (run_tp_dp.sh)", ""]
    lines += dp_part(d, short) + tp_part(d, built_in, short)
    lines += ["## Verdict", ""] + ([f"- SHORT: {s}" for s in short] or ["- every part as expected"])
    print("\n".join(lines))
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
