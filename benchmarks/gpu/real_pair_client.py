"""Real traffic for run_real_pair.sh: the built-in workload against a live SGLang server.

usage: real_pair_client.py PORT WORKLOAD.json OUT.json [RID_PREFIX]

Sends every prompt of ``toy export``'s workload.json in one batched /generate (greedy, the
workload's max tokens, rids RID_PREFIX-<i>) and writes what SGLang itself says about each request
(meta_info), its accept length over the whole workload (sum of completion tokens / sum of
spec_verify_ct, the request-steps' mean the built-in engine reports), and how far its greedy
output agrees with the built-in engine's fp32 continuations (fp16 servers break near-ties
differently, so agreement is reported, not required).
"""

import json
import sys
import urllib.request


def post(port: int, path: str, body: dict, timeout: float = 300) -> object:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(req, timeout=timeout).read())


def leading_match(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):  # an output cut short agrees as far as it goes
        if x != y:
            break
        n += 1
    return n


def main() -> int:
    port, work_path, out_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    prefix = sys.argv[4] if len(sys.argv) > 4 else "e3tpair"
    work = json.load(open(work_path))
    prompts, want = work["prompts"], work["continuations"]
    rids = [f"{prefix}-{i}" for i in range(len(prompts))]
    sp = {"max_new_tokens": work["new_tokens"], "temperature": 0}
    res: dict = {"port": port, "requests": []}
    try:
        res["server_info"] = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/get_server_info", timeout=30).read()
        )
        got = post(port, "/generate", {"input_ids": prompts, "sampling_params": sp, "rid": rids})
    except Exception as exc:  # a server that died: say so in the result, the report names it
        res["error"] = f"{type(exc).__name__}: {exc}"
        json.dump(res, open(out_path, "w"), indent=1)
        print(f"client: {res['error']}")
        return 1
    tokens = verify = lead = same = 0
    for rid, r, w in zip(rids, got if isinstance(got, list) else [got], want, strict=True):
        mi, ids = r["meta_info"], r.get("output_ids") or []
        tokens += mi["completion_tokens"]
        verify += mi.get("spec_verify_ct") or 0
        lead += leading_match(ids, w)
        same += int(ids[: len(w)] == w)
        res["requests"].append({"rid": rid, "meta_info": mi, "output_ids": ids})
    res["summary"] = {
        "requests": len(rids),
        "completion_tokens": tokens,
        "spec_verify_ct": verify,
        "accept_length": tokens / verify if verify else None,
        "prompts_identical_to_built_in": same,
        "leading_tokens_agreeing": lead,
        "leading_tokens_of": sum(len(w) for w in want),
    }
    json.dump(res, open(out_path, "w"), indent=1, default=str)
    print("client:", json.dumps(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
