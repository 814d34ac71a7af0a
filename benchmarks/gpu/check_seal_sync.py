"""The serving path never synchronises the host with the device, the fallback seal path included,
and what it publishes equals the tensors: checked on a CUDA machine under
``torch.cuda.set_sync_debug_mode("error")`` (any implicit host-device sync raises).

usage: python3 -m benchmarks.gpu.check_seal_sync [--json OUT.json]

Paths, each for the in-process sender (``MemoryPublisher``, resolved afterwards, outside the
check) and for the sidecar (``RingPublisher``: the ring written on the serving thread):
- ``engine copies``: SGLang's own host copies of ``accept_lens`` / ``next_token_ids`` and its
  ``copy_done`` event, which stands for our draft copy's event (the steady state);
- ``fallback seal``: the draft was copied without an event (``seal_later``: the last step saw
  SGLang's copies) but this result comes without them: the tracer records an event on the stream
  the copy was queued on (``HostCopy.seal``) and copies the accept lengths and tokens itself,
  ordered after it on the device (``copy_late``);
- ``no engine copies``: neither, from the first step (an engine that never copies).
Exit 1 if a path raised, published a wrong step, or left a step unpublished.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from benchmarks.bench_serving_path import Workload


def _expected(w: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    acc = w.accept.cpu().numpy()
    keep = np.arange(w.n)[None, :] < acc[:, None]
    return w.si.draft_token.cpu().numpy(), acc - 1, w.tokens.cpu().numpy().reshape(w.bs, w.n)[keep]


def run_path(torch: Any, dev: str, sidecar: bool, plan: list[bool]) -> dict[str, Any]:
    """One publisher through ``plan`` (per step: whether SGLang's host copies come with it)."""
    from eagle3_top.hooks.sglang import verify
    from eagle3_top.hooks.sglang.verify import make_around_process_result, make_around_verify
    from eagle3_top.tracer.schema import SourceId, decode
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.ring_publisher import RingPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    w = Workload(torch, dev, 8, 4)
    pub: Any = (
        RingPublisher("tcp://127.0.0.1:0", SourceId.local(engine="check")) if sidecar else MemoryPublisher()
    )
    sub = None
    if sidecar:
        import time

        import zmq

        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(pub.bound_endpoint)
        time.sleep(1.0)  # a late subscriber misses the first frames; this is a check, not a test
    tracer = Tracer(pub, aux_interval_s=1e9)
    av = make_around_verify(lambda _w: tracer, hold=lambda: True)
    ap = make_around_process_result()

    def checked(on: bool) -> None:
        if dev == "cuda":
            torch.cuda.set_sync_debug_mode("error" if on else "default")

    def process(_s: Any, _b: Any, result: Any) -> None:
        checked(False)  # SGLang's own result processing waits for its copies: not ours to check
        if result.copy_done is not None:
            result.copy_done.synchronize()
        else:  # no copies of SGLang's: the tracer copied them itself, ordered on the device
            torch.cuda.current_stream().synchronize() if dev == "cuda" else None
        checked(True)

    error = None
    verify.ENGINE_COPIES["seen"] = plan[0]
    for engine_copies in plan:
        r = w.result()
        try:
            checked(True)  # every line of ours below runs with implicit syncs raising
            res = av(lambda _s, _b, r=r: r, None, w.batch)
            checked(False)
            if engine_copies:
                w.sglang_copy(res)  # SGLang's copy_to_cpu: not ours
            checked(True)
            ap(process, w.scheduler, w.batch, res)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        finally:
            checked(False)
    if sidecar:
        pub.flush(30.0)
        bodies = []
        assert sub is not None
        while sub.poll(2000):
            ev = decode(sub.recv())
            if ev.kind == "step":
                bodies.append(ev.body)
            if len(bodies) == len(plan):
                break
        pub.close()
        sub.close(0)
    else:
        bodies = pub.bodies("step")
    draft, accepted, tokens = _expected(w)
    right = all(
        np.array_equal(np.frombuffer(b["draft"], "<i4"), draft)
        and np.array_equal(np.frombuffer(b["accepted"], "<i4"), accepted)
        and np.array_equal(np.frombuffer(b["tokens"], "<i4"), tokens)
        for b in bodies
    )
    return {
        "steps": len(plan),
        "published": len(bodies),
        "right": right,
        "hook_errors": pub.hook_errors,
        "last_error": pub.last_error,
        "raised": error,
        "ok": error is None and right and len(bodies) == len(plan) and pub.hook_errors == 0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ns = ap.parse_args(argv)
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    plans = {
        "engine copies": [True] * 6,
        "fallback seal": [True, True, False, True, False, False],
        "no engine copies": [False] * 6,
    }
    out: dict[str, Any] = {"device": dev, "sync_debug": dev == "cuda"}
    for name, plan in plans.items():
        for sidecar in (False, True):
            key = f"{name}, {'sidecar' if sidecar else 'in-process sender'}"
            out[key] = run_path(torch, dev, sidecar, plan)
            print(f"{key:45s} {out[key]}")
    ok = all(v["ok"] for v in out.values() if isinstance(v, dict))
    print("sync-debug check:", "PASS" if ok else "FAIL", f"({dev})")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
