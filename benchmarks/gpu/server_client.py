"""HTTP client for run_server_check.sh: check requests (fixed rids) and decode throughput.

usage: server_client.py check PORT OUT.json      requests with rids e3tchk-*, saves meta_info + server info
       server_client.py tput PORT BS NTOK         prints one JSON line: decode tokens/s for BS requests
"""

import json
import sys
import time
import urllib.request


def post(port, path, body, timeout=300):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(req, timeout=timeout).read())


def get(port, path):
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30).read())


def prompts(n):
    return [[(7 * i + 3 * j) % 900 + 5 for j in range(12 + i % 5)] for i in range(n)]


def check(port, out):
    res = {"server_info": None, "requests": []}
    try:
        res["server_info"] = get(port, "/get_server_info")
    except Exception as exc:
        res["server_info_error"] = str(exc)
    groups = [(1, 32), (3, 23), (8, 17), (1, 40)]
    k = 0
    for bs, ntok in groups:
        rids = [f"e3tchk-{k + i}" for i in range(bs)]
        k += bs
        sp = {"max_new_tokens": ntok, "temperature": 0, "ignore_eos": True}
        body = {
            "input_ids": prompts(bs) if bs > 1 else prompts(1)[0],
            "sampling_params": sp,
            "rid": rids if bs > 1 else rids[0],
        }
        r = post(port, "/generate", body)
        for rid, x in zip(rids, r if isinstance(r, list) else [r], strict=True):
            res["requests"].append({"rid": rid, "meta_info": x["meta_info"]})
    json.dump(res, open(out, "w"), indent=1, default=str)
    print("check requests", len(res["requests"]))


def tput(port, bs, ntok):
    sp = {"max_new_tokens": ntok, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": prompts(bs) if bs > 1 else prompts(1)[0], "sampling_params": sp}
    t0 = time.perf_counter()
    r = post(port, "/generate", body)
    dt = time.perf_counter() - t0
    rs = r if isinstance(r, list) else [r]
    toks = sum(x["meta_info"]["completion_tokens"] for x in rs)
    print(json.dumps({"bs": bs, "tokens": toks, "seconds": dt, "tok_s": toks / dt}))


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(int(sys.argv[2]), sys.argv[3])
    else:
        tput(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
