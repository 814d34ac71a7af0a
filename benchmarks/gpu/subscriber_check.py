"""Plain pyzmq + msgpack subscriber (no project code): records every event until a stop file appears.

usage: subscriber_check.py TAG ENDPOINT SECONDS OUTDIR   (stops early when OUTDIR/stop_TAG exists)
OUTDIR/heard_TAG appears with the first event received: from then on it is subscribed.
Writes OUTDIR/events_TAG.json: hello (last), per-rid step rows [accepted drafts per verify, in order],
aux events (first 3), health (last), counts per kind, rows the tracer left out (step `discarded`).
"""

import json
import os
import sys
import time

import msgpack
import numpy as np
import zmq

tag, ep, secs, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
s = zmq.Context().socket(zmq.SUB)
s.connect(ep)
s.setsockopt(zmq.SUBSCRIBE, b"")
kinds: dict[str, int] = {}
rows: dict[str, list[int]] = {}
hello, aux, health, seqgap, last_seq, discarded = None, [], None, 0, {}, 0
t_end = time.time() + secs
stop = os.path.join(out, f"stop_{tag}")
while time.time() < t_end and not os.path.exists(stop):
    if not s.poll(200):
        continue
    ev = msgpack.unpackb(s.recv(), raw=False)
    if not kinds:
        open(os.path.join(out, f"heard_{tag}"), "w").close()
    k = ev.get("kind")
    kinds[k] = kinds.get(k, 0) + 1
    src = str(ev.get("src"))
    if src in last_seq and ev.get("seq", 0) != last_seq[src] + 1:
        seqgap += 1
    last_seq[src] = ev.get("seq", 0)
    if k == "hello":
        hello = ev
    elif k == "aux" and len(aux) < 3:
        aux.append(ev)
    elif k == "health":
        health = ev
    elif k == "step":
        discarded += int(ev.get("discarded", 0))
        acc = ev["accepted"]
        if isinstance(acc, bytes):
            acc = np.frombuffer(acc, "<i4").tolist()
        for rid, a in zip(ev["rids"], acc, strict=True):
            rows.setdefault(str(rid), []).append(int(a))
json.dump(
    {
        "kinds": kinds,
        "seq_gaps": seqgap,
        "hello": hello,
        "aux": aux,
        "health": health,
        "rows": rows,
        "discarded": discarded,
    },  # fmt: skip
    open(os.path.join(out, f"events_{tag}.json"), "w"),
    default=str,
)
print("subscriber", tag, kinds, "rids", len(rows), "discarded rows", discarded)
