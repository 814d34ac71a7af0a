"""Compare what a subscriber saw with what SGLang itself reports (run_server_check.sh).

usage: compare_check.py TAG OUTDIR DRAFT_CONFIG   -> prints a verdict, writes OUTDIR/verdict_TAG.json

- hello: effective speculative args == /get_server_info's server_args; ids read == the draft config's
  eagle_config ids; capture layers (native) == ids + 1 (SGLang's Llama rule, observed on this build).
- steps: per check request (rid e3tchk-*), the step rows' accepted counts, histogrammed, equal
  meta_info spec_accept_histogram, and the row count equals spec_verify_ct exactly: the tail row
  the overlap scheduler runs after a request finished is left out by the tracer (step `discarded`).
- other rids: HEALTH_CHECK_* = /health probes; anything else = SGLang's internal warm-up request.
"""

import json
import os
import sys

tag, out, dcfg = sys.argv[1], sys.argv[2], sys.argv[3]
ev = json.load(open(os.path.join(out, f"events_{tag}.json")))
chk = json.load(open(os.path.join(out, f"check_{tag}.json")))
draft = json.load(open(dcfg))
v = {"tag": tag, "problems": []}
hello = ev.get("hello") or {}
sa = (chk.get("server_info") or {}).get("server_args", chk.get("server_info") or {})
eff = (hello.get("spec") or {}).get("effective", {})
names = {"algorithm": "speculative_algorithm", "num_steps": "speculative_num_steps",
         "topk": "speculative_eagle_topk", "num_draft_tokens": "speculative_num_draft_tokens"}  # fmt: skip
v["effective"] = {k: [eff.get(k), sa.get(s)] for k, s in names.items()}
for k, (a, b) in v["effective"].items():
    if str(a) != str(b):
        v["problems"].append(f"hello effective {k}={a} but server_args {b}")
ids = draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
aux = hello.get("aux") or {}
v["ids_read"] = [aux.get("ids_read"), ids]
v["capture_native"] = [aux.get("capture_native"), [i + 1 for i in ids]]
v["capture_canonical"] = aux.get("capture_canonical")
if aux.get("ids_read") != ids:
    v["problems"].append(f"ids_read {aux.get('ids_read')} != draft config {ids}")
if aux.get("capture_native") != [i + 1 for i in ids]:
    v["problems"].append(f"capture_native {aux.get('capture_native')} != {[i + 1 for i in ids]}")
rows = ev["rows"]
tails = []
per = []
for r in chk["requests"]:
    rid, mi = r["rid"], r["meta_info"]
    got = rows.get(rid, [])
    ct = mi.get("spec_verify_ct")
    hist = list(mi.get("spec_accept_histogram") or [])
    extra = len(got) - (ct or 0)
    used = got[: ct or 0]
    h = [0] * max(len(hist), (max(used) + 1) if used else 0)
    for a in used:
        h[a] += 1
    trim = lambda x: list(x[: max([i + 1 for i, c in enumerate(x) if c] or [0])])  # noqa: E731
    ok = trim(h) == trim(hist) and extra == 0
    tails.append(extra)
    per.append({"rid": rid, "rows": len(got), "spec_verify_ct": ct, "extra_tail_rows": extra, "hist_stream": h,
                "hist_sglang": hist, "sum_accept_len": sum(a + 1 for a in used),
                "completion_tokens": mi.get("completion_tokens"), "ok": ok})  # fmt: skip
    if not ok:
        v["problems"].append(f"{rid}: stream {len(got)} rows {h} vs sglang ct={ct} {hist}")
v["requests"] = per
v["tail_rows"] = sorted(set(tails))
other = {k: len(x) for k, x in rows.items() if not k.startswith("e3tchk-")}
v["health_check_rids"] = sum(1 for k in other if k.startswith("HEALTH_CHECK"))
v["internal_other_rids"] = {k: n for k, n in other.items() if not k.startswith("HEALTH_CHECK")}
v["kinds"] = ev["kinds"]
v["discarded_rows"] = {
    "in_steps": ev.get("discarded", 0),
    "health": (ev.get("health") or {}).get("discarded_rows"),
}
v["seq_gaps"] = ev["seq_gaps"]
v["health"] = ev.get("health")
v["aux_first"] = (ev.get("aux") or [None])[0]
v["pass"] = not v["problems"] and bool(per)
json.dump(v, open(os.path.join(out, f"verdict_{tag}.json"), "w"), indent=1, default=str)
print(f"== {tag}: {'PASS' if v['pass'] else 'FAIL'}; effective {v['effective']}; ids_read {v['ids_read']}; "
      f"capture {v['capture_native']} canonical {v['capture_canonical']}; tail rows per request {v['tail_rows']}; "
      f"discarded rows {v['discarded_rows']}; health-check rids {v['health_check_rids']}; other internal rids {v['internal_other_rids']}; kinds {v['kinds']}")  # fmt: skip
for p in v["problems"][:10]:
    print("  problem:", p)
for r in per[:3]:
    print("  ", r)
