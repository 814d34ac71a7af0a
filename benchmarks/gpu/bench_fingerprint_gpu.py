"""GPU cost of the aux fingerprint of a Kimi-sized verify batch, against reading it once.

usage (on a CUDA machine, eagle3_top importable — see run_gpu.sh):
    python3 benchmarks/gpu/bench_fingerprint_gpu.py [--json OUT.json]

Measures: device copy bandwidth (4 GiB buffer); the floor = time to read the [1024, 21504] bf16
aux tensor once at that bandwidth; the fused Triton fingerprint (tracer/serving/fingerprint_cuda.py, a few
launch configurations) and the torch fallback, in GPU time (CUDA events around a call queued behind
a busy-wait kernel, so CPU launch overhead is not counted). Checks the fused path against the torch
path (random, with NaN/Inf rows, odd shapes, fp16/fp32), then runs fingerprint() and the SGLang
verify wrapper's record path under torch.cuda.set_sync_debug_mode("error").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch


def gpu_time_us(fn: Any, n: int = 100) -> float:
    """Median GPU time of fn(): start/end events queued behind a sleep kernel."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(4_000_000)  # ~2 ms busy-wait: the CPU queues fn() while the GPU waits
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)


def drain(pub: Any) -> None:
    """Resolve what the tracer recorded, as the sender thread would (its pinned buffers go back to
    the pool), and forget it."""
    for _, body in pub.events:
        getattr(body, "resolve", lambda: None)()
    pub.events.clear()


def host_time_us(tracer: Any, pub: Any, call: Any, rounds: int = 12, per_round: int = 20) -> dict[str, float]:
    """Median wall time per ``call()`` on the calling thread: what the scheduler's CPU pays per
    verify (attribute reads, copy and kernel launches, an event, a deque append), for a step alone
    and for a step with an aux fingerprint. Between rounds, untimed, the recorded events are
    resolved, as the sender thread would, so their pinned buffers go back to the pool."""
    import time

    out = {}
    for name, interval in (("step only", 1e9), ("step + aux fingerprint", 0.0)):
        tracer.aux_interval_s, tracer._next_aux = interval, 0.0
        per_call = []
        for r in range(rounds + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_round):
                call()
            dt = (time.perf_counter() - t0) / per_round * 1e6
            drain(pub)
            if r:  # the first round fills the pinned pool
                per_call.append(dt)
        out[name] = round(statistics.median(per_call), 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from eagle3_top.tracer.serving import fingerprint_cuda as fc
    from eagle3_top.tracer.serving.fingerprint import MAX_DEVICE_ROWS, _raw_stats, _sketch_on, fingerprint

    dev = "cuda"
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    try:
        import triton

        res["triton"] = triton.__version__
    except Exception as exc:
        res["triton"] = f"missing: {exc}"
    big = torch.empty(4 * 1024**3 // 2, dtype=torch.bfloat16, device=dev)
    big2 = torch.empty_like(big)
    t = gpu_time_us(lambda: big2.copy_(big), 20)
    bw = 2 * big.numel() * 2 / (t * 1e-6)

    R, C, slots = 1024, 21504, 3
    torch.manual_seed(0)
    x = torch.randn(R, C, device=dev, dtype=torch.bfloat16)
    x3 = x.view(R, slots, C // slots)
    floor = x.numel() * 2 / bw * 1e6
    res.update(bandwidth_TBps=bw / 1e12, floor_us=floor, shape=[R, C], dtype="bfloat16")
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; floor (read [1024, 21504] bf16 once): {floor:.2f} us")
    sk = _sketch_on(x.device, C // slots)

    # correctness first: fused vs torch
    checks = []
    cases = [((1024, 3, 7168), torch.bfloat16), ((37, 3, 100), torch.float32), ((300, 2, 4096), torch.float16),
             ((5000, 3, 1024), torch.bfloat16), ((9, 2, 20), torch.float32)]  # fmt: skip
    ok_all = fc.available()
    res["fused_available"] = ok_all
    res["fused_failed"] = fc._failed
    for shape, dt in cases if ok_all else []:
        y = torch.randn(*shape, device=dev).to(dt)
        y[3, 1, 5] = float("nan")
        y[min(7, shape[0] - 1), 0, 7] = float("inf")
        y[-1, -1, -1] = -float("inf")
        a = fc._launch(y, _sketch_on(y.device, shape[2]), fc.CONFIG).cpu().numpy()
        b = _raw_stats(y).cpu().numpy()
        err = float(np.max(np.abs(a - b) / (np.abs(b) + 1e-2)))
        ok = bool(np.allclose(a, b, rtol=2e-3, atol=2e-2 * max(1.0, shape[0] / 100)))
        checks.append({"shape": list(shape), "dtype": str(dt), "ok": ok, "max_rel_err": err})
        ok_all &= ok
        print(f"fused vs torch {shape} {dt}: {'ok' if ok else 'MISMATCH'} (max rel err {err:.2e})")
        if not ok:
            print(" fused", a[:, :6].tolist(), "\n torch", b[:, :6].tolist())
    res["agreement"] = checks
    if fc.available():  # the result's trip to the host through the copy kernel (mapped pinned memory)
        from eagle3_top.tracer.serving.deferred import HostCopy

        small = fc._launch(x3[::8], _sketch_on(x.device, C // slots), fc.SAMPLED_CONFIG)
        got = HostCopy.written(tuple(small.shape), small.dtype, lambda h: fc.copy_to_host(small, h)).resolve()
        same = bool(np.array_equal(got, small.cpu().numpy()))
        res["mapped_copy"] = {"ok": same, "failed": fc._copy_failed}
        print(
            f"copy kernel into pinned host memory: {'ok' if same else 'MISMATCH'} (failed: {fc._copy_failed})"
        )
        ok_all &= same and fc._copy_failed is None

    timings = {"one fp32 sum (reference)": gpu_time_us(lambda: x3.sum((0, 2), dtype=torch.float32))}
    timings["torch path (_raw_stats)"] = gpu_time_us(lambda: _raw_stats(x3))
    configs = {
        "default": dict(fc.CONFIG),
        "rpp32_sub8": dict(fc.CONFIG, rows_per_prog=32, sub_rows=8),
        "rpp128_sub16": dict(fc.CONFIG, rows_per_prog=128, sub_rows=16),
        "rpp64_sub8_w4": dict(fc.CONFIG, sub_rows=8, warps=4),
        "rpp64_bc512_w4": dict(fc.CONFIG, block_c=512, sub_rows=16, warps=4),
        "rpp32_sub16_bc512": dict(fc.CONFIG, rows_per_prog=32, block_c=512, warps=4),
    }
    if fc.available():
        if os.environ.get("SWEEP", "1") != "1":  # short run: the default launch shape only
            configs = {"default": configs["default"]}
        for name, cfg in configs.items():
            try:
                timings[f"fused {name}"] = gpu_time_us(lambda cfg=cfg: fc._launch(x3, sk, cfg))
            except Exception as exc:
                print(f"fused {name} failed: {type(exc).__name__}: {exc}"[:400])
        timings["fingerprint() end to end, SAMPLED_CONFIG (default)"] = gpu_time_us(
            lambda: fingerprint(x, slots)
        )
        # the sampled view fingerprint() takes: launch shapes, kernels alone and the whole call
        xs = x3[:: -(-R // MAX_DEVICE_ROWS)]
        default_sampled = dict(fc.SAMPLED_CONFIG)
        sweep = []
        shapes = ((4, 4), (8, 8), (16, 8), (16, 16)) if os.environ.get("SWEEP", "1") == "1" else ()
        for rpp, sub in shapes:
            for bc, warps in ((512, 4), (1024, 4), (2048, 8)):
                for fbc in (256, 1024):
                    cfg = dict(
                        fc.CONFIG, rows_per_prog=rpp, sub_rows=sub, block_c=bc, warps=warps, fin_block_c=fbc
                    )
                    try:
                        k = gpu_time_us(lambda cfg=cfg: fc._launch(xs, sk, cfg), 40)
                        fc.SAMPLED_CONFIG = cfg
                        e2e = gpu_time_us(lambda: fingerprint(x, slots), 40)
                    except Exception as exc:
                        print(f"sampled {cfg} failed: {type(exc).__name__}: {exc}"[:300])
                        continue
                    finally:
                        fc.SAMPLED_CONFIG = default_sampled
                    sweep.append({"rpp": rpp, "sub": sub, "block_c": bc, "warps": warps, "fin_block_c": fbc,
                                  "kernels_us": k, "end_to_end_us": e2e})  # fmt: skip
        sweep.sort(key=lambda d: d["end_to_end_us"])
        # where the time goes, default sampled shape: first kernel alone, the small result's copy
        timings["sampled view, first kernel alone (default shape)"] = gpu_time_us(
            lambda: fc._launch(xs, sk, default_sampled, main_only=True)
        )
        small = fc._launch(xs, sk, default_sampled)
        pinned = torch.empty(small.shape, dtype=small.dtype, pin_memory=True)
        timings["copy of the [slots, 22] result to pinned host (non-blocking)"] = gpu_time_us(
            lambda: pinned.copy_(small, non_blocking=True)
        )
        timings["same, by the copy kernel into pinned host memory (what fingerprint() does)"] = gpu_time_us(
            lambda: fc.copy_to_host(small, pinned)
        )
        res["sampled_sweep"] = sweep
        print(f"sampled view {list(xs.shape)}: best launch shapes (kernels / whole fingerprint() call)")
        for d in sweep[:8]:
            print(f"  {d}  = {d['kernels_us'] / floor:.2f} / {d['end_to_end_us'] / floor:.2f} x floor")
        if sweep:
            best_cfg = sweep[0]
            fc.SAMPLED_CONFIG = dict(fc.CONFIG, rows_per_prog=best_cfg["rpp"], sub_rows=best_cfg["sub"],
                                     block_c=best_cfg["block_c"], warps=best_cfg["warps"],
                                     fin_block_c=best_cfg["fin_block_c"])  # fmt: skip
            timings["fingerprint() end to end, best sampled shape (re-timed)"] = gpu_time_us(
                lambda: fingerprint(x, slots)
            )
            fc.SAMPLED_CONFIG = default_sampled
        # candidate: one kernel for the sampled view, writing straight into pinned host memory
        from eagle3_top.tracer.serving import fingerprint_cuda_onepass as op

        onepass: dict[str, Any] = {}
        host = torch.empty((slots, 22), dtype=torch.float32, pin_memory=True)
        for bc in (128, 256, 512):
            try:
                ok_one = True
                for shape, dt in cases[:4]:
                    y = torch.randn(*shape, device=dev).to(dt)[:: max(1, shape[0] // MAX_DEVICE_ROWS)]
                    y[3, 1, 5] = float("nan")
                    y[min(7, y.shape[0] - 1), 0, 7] = float("inf")
                    a = op.raw_stats(y, _sketch_on(y.device, shape[2]), block_c=bc).cpu().numpy()
                    b = _raw_stats(y).cpu().numpy()
                    ok_one &= bool(np.allclose(a, b, rtol=2e-3, atol=2e-2))
                op.raw_stats(xs, sk, out=fc.HostPointer(host), block_c=bc)
                torch.cuda.synchronize()
                ok_one &= bool(np.allclose(host.numpy(), _raw_stats(xs).cpu().numpy(), rtol=2e-3, atol=2e-2))
                t = gpu_time_us(lambda bc=bc: op.raw_stats(xs, sk, out=fc.HostPointer(host), block_c=bc))
                onepass[f"block_c {bc}"] = {"agrees": ok_one, "us": t, "x_floor": t / floor}
                print(
                    f"one-pass candidate, block_c {bc}: {t:.2f} us = {t / floor:.2f} x floor, agrees: {ok_one}"
                )
            except Exception as exc:
                onepass[f"block_c {bc}"] = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
                print(f"one-pass candidate, block_c {bc} failed: {type(exc).__name__}: {exc}"[:300])
        res["onepass_candidate"] = onepass
        # and through fingerprint() itself (EAGLE3_TOP_FINGERPRINT_ONEPASS=1): fields vs the default path
        base = fingerprint(x, slots).resolve().to_body()
        os.environ[op.ENV_ENABLE] = "1"
        try:
            one = fingerprint(x, slots).resolve().to_body()
            agree = all(
                np.allclose(
                    np.asarray(one[k], dtype=float), np.asarray(base[k], dtype=float), rtol=2e-3, atol=1e-3
                )
                for k in base
                if isinstance(base[k], (list, float, int)) and k in one
            )
            t = gpu_time_us(lambda: fingerprint(x, slots))
            onepass["fingerprint() end to end"] = {
                "agrees": agree,
                "us": t,
                "x_floor": t / floor,
                "failed": op._failed,
            }
            print(
                f"fingerprint() end to end, one-pass: {t:.2f} us = {t / floor:.2f} x floor, fields agree: {agree}"
            )
        finally:
            del os.environ[op.ENV_ENABLE]
    res["timings_us"] = timings
    for k, v in timings.items():
        print(f"{k:50s} {v:8.2f} us = {v / floor:5.2f} x floor")
    best = min((v for k, v in timings.items() if k.startswith("fused")), default=None)
    e2e = timings.get("fingerprint() end to end, SAMPLED_CONFIG (default)", float("nan"))
    res["default_ratio"] = e2e / floor  # what the tracer pays per sampled aux step, copy included
    res["best_fused_ratio"] = best / floor if best else None

    # no host sync: fingerprint() and the verify wrapper's record path
    from eagle3_top.hooks.sglang.verify import record_verify
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    pub = MemoryPublisher()
    tracer = Tracer(pub, aux_interval_s=0.0)  # type: ignore[arg-type]
    tracer.set_slot_width(C // slots)
    bs, n = 64, 16
    si = SimpleNamespace(
        draft_token=torch.randint(0, 1000, (bs * n,), device=dev), topk=1, draft_token_num=n,
        retrieve_next_token=None, retrieve_next_sibling=None,
    )  # fmt: skip
    batch = SimpleNamespace(
        spec_info=si, reqs=[SimpleNamespace(rid=f"r{i}") for i in range(bs)], forward_mode=None
    )
    result = SimpleNamespace(
        accept_lens=torch.randint(1, n + 1, (bs,), device=dev, dtype=torch.int32),
        next_token_ids=torch.randint(0, 1000, (bs * n,), device=dev),
        logits_output=SimpleNamespace(hidden_states=x),
    )
    guarded = tracer.guarded(record_verify)
    guarded(tracer, batch, result, 0.0)  # warm-up (pinned pool, sketch upload)
    drain(pub)
    raised = None
    torch.cuda.set_sync_debug_mode("error")
    try:
        fingerprint(x, slots)
        for _ in range(3):
            guarded(tracer, batch, result, 0.0)
    except Exception as exc:
        raised = f"{type(exc).__name__}: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    kinds = [k for k, _ in pub.events]
    drain(pub)
    res["sync_debug"] = {
        "raised": raised,
        "hook_errors": pub.hook_errors,
        "last_error": pub.last_error,
        "events": kinds,
    }
    print("sync_debug_mode('error'):", res["sync_debug"])
    # the serving path's two halves: the snapshot on the serving thread, the reduction on the
    # sender's (here a second thread); no host sync in either, and an overwrite of the engine's
    # buffer right after the snapshot (a CUDA graph's next replay) must not change the result
    import threading

    from eagle3_top.tracer.serving.fingerprint import fingerprint_snapshot

    live = x.clone()
    fingerprint_snapshot(live, slots).resolve()  # warm-up: the sender's stream
    before = live.clone()
    got: list[Any] = []
    snap_raised = None
    torch.cuda.set_sync_debug_mode("error")
    try:
        snap = fingerprint_snapshot(live, slots)
        live.mul_(3.0)
        th = threading.Thread(target=lambda: got.append(snap.resolve()))
        th.start()
        th.join()
    except Exception as exc:
        snap_raised = f"{type(exc).__name__}: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    ref = fingerprint(before, slots).resolve()
    snap_ok = bool(
        got
        and got[0].rows_total == ref.rows_total
        and np.allclose(got[0].rms, ref.rms, rtol=1e-3)
        and np.allclose(got[0].sketch, ref.sketch, rtol=1e-3, atol=1e-4)
    )
    res["snapshot"] = {"raised": snap_raised, "agrees_with_fingerprint": snap_ok, "resolved": len(got)}
    print("serving-path snapshot (sync_debug 'error', resolved on a second thread):", res["snapshot"])
    ok_all &= snap_ok and snap_raised is None
    t_snap = gpu_time_us(lambda: fingerprint(x[:: -(-R // MAX_DEVICE_ROWS)].clone(), slots, clone=False))
    res["snapshot_path_gpu_us"] = t_snap
    res["snapshot_path_ratio"] = t_snap / floor
    print(
        f"serving path's GPU work, snapshot copy + fingerprint() of it: {t_snap:.2f} us = {t_snap / floor:.2f} x floor"
    )
    t_rec = gpu_time_us(lambda: guarded(tracer, batch, result, 0.0), 50)
    res["verify_record_gpu_us"] = t_rec
    print(f"verify record path (step + aux fingerprint), GPU time: {t_rec:.2f} us")
    try:
        res["verify_record_host_us"] = host_time_us(tracer, pub, lambda: guarded(tracer, batch, result, 0.0))
        print(f"verify record path, serving-thread (host) time per call: {res['verify_record_host_us']}")
    except Exception as exc:  # a measurement, not a check: never cost the rest of the run
        print(f"host time not measured: {type(exc).__name__}: {exc}"[:300])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    good = ok_all and raised is None and pub.hook_errors == 0 and (res["snapshot_path_ratio"] <= 2.0)
    print(
        "RESULT",
        "PASS" if good else "FAIL",
        f"fingerprint() end to end = {res['default_ratio']:.2f} x floor; the serving path's "
        f"(snapshot + fingerprint) = {res['snapshot_path_ratio']:.2f} x floor",
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
