"""The serving thread's cost of the SGLang hooks per verify step, against the path before, same run.

usage: python -m benchmarks.bench_serving_path [--json OUT.json] [--quick]

What the scheduler's thread pays per verify step for our hooks: the verify wrapper
(``make_around_verify``) plus the result hook (``make_around_process_result``), timed around our
code only. SGLang's own work between them, its copy of ``accept_lens`` and ``next_token_ids`` into
pinned host memory with the ``copy_done`` event (``GenerationBatchResult.copy_to_cpu``), is done
the way SGLang does it and not timed. Arms, interleaved round by round:

- ``now``: the hooks as shipped: one copy (the draft) and an event at verify; SGLang's host copies
  read at result time; rids read on the sender thread.
- ``before``: the path before 2026-12-06, rebuilt from the same primitives: three copies at verify,
  each with its event, ``str(r.rid)`` per row and ``req.finished()`` per row on the serving thread.
- ``ring``: the shipped hooks on a ``RingPublisher`` (the SGLang plugin's default): the step's
  columns are written into a shared-memory ring on the serving thread, after SGLang's result
  processing has waited for its copies; a sidecar process publishes them.

Each for a step alone and for a step with an aux fingerprint (``aux_interval_s = 0``), at batch 1,
16 and 64 (4 draft tokens, as ``--speculative-num-draft-tokens 4``) and 64 x 16, hidden ``--hidden``
(4096, Llama-3.1-8B's; 7168 for Kimi K2's) x 3 slots; median and p99 over every step timed. Between rounds, untimed, the recorded events are resolved as the sender thread would.

Then a scheduler-like loop (~1 ms of small device work per iteration, then both hooks):
iterations per second with the tracer off (our wrappers in place, no tracer: the smallest hook that
does nothing), with no wrapper at all (``bare``: the floor), with the hooks on and the sender idle, with a real
``Publisher``'s sender busy (a subscriber process draining it), and with the sender in a sidecar
process (``RingPublisher``), rotating round by round, so the hooks' own cost and the sender
thread's share of the GIL show apart.

Before timing anything it checks that the shipped hooks publish the right steps, through SGLang's
host copies and without them (``--check-only``: just that).

On a CUDA machine the tensors are on the GPU (the figures that matter: the scheduler host's);
without one, on CPU, so the CI box sees regressions of the Python path.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from types import SimpleNamespace
from typing import Any

from benchmarks.common import drain_subscriber, machine


class _Done:
    """SGLang's ``copy_done`` on a machine without CUDA: a copy that is done at once."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class Workload:
    """SGLang-shaped verify objects of one batch size, and SGLang's own result copy."""

    def __init__(self, torch: Any, dev: str, bs: int, n: int, hidden: int = 4096, slots: int = 3) -> None:
        self.torch, self.dev, self.bs, self.n = torch, dev, bs, n
        g = torch.Generator(device="cpu").manual_seed(bs * 100 + n)
        self.reqs = [
            SimpleNamespace(rid=f"{i:032x}", finished_reason=None, is_retracted=False, finished=lambda: False)
            for i in range(bs)
        ]
        self.si = SimpleNamespace(
            draft_token=torch.randint(1, 128_000, (bs * n,), generator=g).to(dev),
            topk=1,
            draft_token_num=n,
            retrieve_next_token=None,
            retrieve_next_sibling=None,
        )
        self.batch = SimpleNamespace(spec_info=self.si, reqs=self.reqs, forward_mode=None)
        dtype = torch.bfloat16 if dev == "cuda" else torch.float32
        self.accept = torch.randint(1, n + 1, (bs,), generator=g, dtype=torch.int32).to(dev)
        self.tokens = torch.randint(1, 128_000, (bs * n,), generator=g).to(dev)
        self.hidden = (torch.randn(bs * n, slots * hidden, generator=g) * 0.5 + 0.1).to(dtype).to(dev)
        self.scheduler = SimpleNamespace(enable_overlap=True)

    def result(self) -> Any:
        return SimpleNamespace(
            accept_lens=self.accept,
            next_token_ids=self.tokens,
            logits_output=SimpleNamespace(hidden_states=self.hidden),
            copy_done=None,
        )

    def sglang_copy(self, result: Any) -> None:
        """What SGLang does between verify and processing (0.5.17 ``copy_to_cpu``); not ours."""
        torch = self.torch
        if self.dev != "cuda":  # the same on CPU, so that CI times the path a GPU server takes
            result.copy_done = _Done()
            result.accept_lens, result.next_token_ids = (
                result.accept_lens.clone(),
                result.next_token_ids.clone(),
            )
            return
        result.copy_done = torch.cuda.Event()
        for name in ("accept_lens", "next_token_ids"):
            t = getattr(result, name)
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            setattr(result, name, host)
        result.copy_done.record()


def _before_hooks(get_tracer: Any) -> tuple[Any, Any]:
    """The path before, from the same primitives: three copies at verify, rids and finished()
    read on the serving thread."""
    from eagle3_top.hooks.sglang.verify import STEP_ATTR, _capturing, _is_idle
    from eagle3_top.tracer.serving.pending import DeferredStep

    def record(tracer: Any, batch: Any, result: Any, dt: float) -> None:
        if _capturing():
            return
        si, reqs = batch.spec_info, batch.reqs
        if si is None or not reqs or _is_idle(batch):
            return
        rids = [str(r.rid) for r in reqs]
        step = DeferredStep(
            tracer.steps, rids, 1, dt, si.draft_token, result.accept_lens, result.next_token_ids, None
        )
        tracer.steps += 1
        setattr(result, STEP_ATTR, (tracer, step))
        lo = result.logits_output
        if lo.hidden_states is not None and tracer.want_aux():
            tracer.record_aux(lo.hidden_states, where="verify_aux")

    def around_verify(original: Any, self: Any, batch: Any) -> Any:
        t0 = time.perf_counter()
        result = original(self, batch)
        tracer = get_tracer(self)
        if tracer is not None and tracer.recording:
            tracer.hook(record)(tracer, batch, result, time.perf_counter() - t0)
        return result

    def release(tracer: Any, sched: Any, batch: Any, step: Any) -> None:
        reqs = batch.reqs
        if sched.enable_overlap and len(reqs) == len(step.rids):
            gone = [bool(r.finished() or r.is_retracted) for r in reqs]
            if any(gone) and all(str(r.rid) == rid for r, rid in zip(reqs, step.rids, strict=True)):
                step.discard(gone)
        tracer.publish_step(step)

    def around_process(original: Any, self: Any, batch: Any, result: Any) -> Any:
        held = getattr(result, STEP_ATTR, None)
        if held is not None:
            setattr(result, STEP_ATTR, None)
            tracer, step = held
            tracer.hook(release)(tracer, self, batch, step)
        return original(self, batch, result)

    return around_verify, around_process


def _now_hooks(get_tracer: Any) -> tuple[Any, Any]:
    from eagle3_top.hooks.sglang.verify import make_around_process_result, make_around_verify

    return make_around_verify(get_tracer, hold=lambda: True), make_around_process_result()


def check_paths(torch: Any, dev: str) -> dict[str, bool]:
    """What is timed is right: the shipped hooks' step, through SGLang's host copies and without
    them (copied when the result is processed, after the verify on the device), equals the tensors,
    twice in a row (the second draft copy has no event of its own: SGLang's stands for it)."""
    import numpy as np
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    out = {}
    for name, engine_copies in (("with SGLang's host copies", True), ("without them", False)):
        w = Workload(torch, dev, 3, 4)
        pub = MemoryPublisher()
        tracer = Tracer(pub, aux_interval_s=1e9)  # type: ignore[arg-type]
        av, ap = _now_hooks(lambda _w, t=tracer: t)
        ok = True
        for _ in range(2):
            r = w.result()
            res = av(lambda _s, _b, r=r: r, None, w.batch)
            if engine_copies:
                w.sglang_copy(res)
            ap(lambda _s, _b, _r: None, w.scheduler, w.batch, res)
        bodies = pub.bodies("step")
        acc = w.accept.cpu().numpy()
        keep = np.arange(w.n)[None, :] < acc[:, None]
        tokens = w.tokens.cpu().numpy().reshape(w.bs, w.n)[keep]
        for b in bodies:
            ok &= b["rids"] == [r.rid for r in w.reqs]
            ok &= np.array_equal(np.frombuffer(b["draft"], "<i4"), w.si.draft_token.cpu().numpy())
            ok &= np.array_equal(np.frombuffer(b["accepted"], "<i4"), acc - 1)
            ok &= np.array_equal(np.frombuffer(b["tokens"], "<i4"), tokens)
        out[name] = bool(ok and len(bodies) == 2 and pub.hook_errors == 0)
    print("published steps equal the tensors:", out)
    return out


def _ring_publisher() -> Any:
    from eagle3_top.tracer.schema import SourceId
    from eagle3_top.tracer.serving.ring_publisher import RingPublisher

    return RingPublisher("tcp://127.0.0.1:0", SourceId.local(engine="bench"))


def host_times(torch: Any, dev: str, quick: bool, hidden: int = 4096) -> dict[str, Any]:
    """Serving-thread µs per verify step (median and p99 over every step timed), per arm, batch
    shape and aux setting. ``ring``: the shipped hooks on a ``RingPublisher``, whose sidecar process
    reads what the serving thread wrote (the serving thread's share only is timed)."""
    from eagle3_top.tracer.serving.deferred import Deferred
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    rounds, per_round = (8, 20) if quick else (30, 40)
    out: dict[str, Any] = {}
    names = ("before", "now", "ring")
    for bs, n in ((1, 4), (16, 4), (64, 4), (64, 16)):
        w = Workload(torch, dev, bs, n, hidden=hidden)
        for aux in (False, True):
            arms = {}
            for arm, make in (("before", _before_hooks), ("now", _now_hooks), ("ring", _now_hooks)):
                pub = _ring_publisher() if arm == "ring" else MemoryPublisher()
                tracer = Tracer(pub, aux_interval_s=0.0 if aux else 1e9)
                tracer.set_slot_width(hidden)
                av, ap = make(lambda _w, t=tracer: t)
                arms[arm] = (pub, tracer, av, ap, [])
            verify = lambda _self, _batch, w=w: w._r  # noqa: E731
            inside = [0.0]

            def process(_self: Any, _batch: Any, result: Any, inside: list[float] = inside) -> None:
                # SGLang's own result processing begins by waiting for its copies: not ours
                t = time.perf_counter()
                result.copy_done.synchronize()
                inside[0] = time.perf_counter() - t

            for r in range(rounds + 1):
                for arm in names[r % 3 :] + names[: r % 3]:
                    pub, tracer, av, ap, times = arms[arm]
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    for _ in range(per_round):
                        w._r = w.result()  # type: ignore[attr-defined]
                        t0 = time.perf_counter()
                        res = av(verify, None, w.batch)
                        t1 = time.perf_counter()
                        w.sglang_copy(res)
                        t2 = time.perf_counter()
                        ap(process, w.scheduler, w.batch, res)
                        took = t1 - t0 + time.perf_counter() - t2 - inside[0]
                        if r:  # the first round fills the pinned pools
                            times.append(took * 1e6)
                    if arm != "ring":
                        for _, body in pub.events:  # as the sender thread would, untimed
                            if isinstance(body, Deferred):
                                body.resolve()
                        pub.events.clear()
                    else:
                        pub.flush(30.0)  # the sidecar (and aux thread) catch up, untimed
                    if pub.hook_errors:
                        raise RuntimeError(f"{arm}: hook error {pub.last_error}")
            key = f"batch {bs} x {n}" + (", step + aux fingerprint" if aux else ", step")
            row: dict[str, Any] = {}
            for arm in names:
                ts = sorted(arms[arm][4])
                row[f"{arm}_us"] = round(statistics.median(ts), 2)
                row[f"{arm}_p99_us"] = round(ts[min(len(ts) - 1, int(len(ts) * 0.99))], 2)
            ring_pub = arms["ring"][0]
            row["ring_dropped"] = ring_pub.dropped
            ring_pub.close()
            row["now_over_before"] = round(row["now_us"] / row["before_us"], 3)
            out[key] = row
            print(
                f"{key:42s} ring {row['ring_us']:7.2f} us (p99 {row['ring_p99_us']:7.2f})   now {row['now_us']:7.2f}"
                f" (p99 {row['now_p99_us']:7.2f})   before {row['before_us']:7.2f} us"
            )
    return out


def profile_now(torch: Any, dev: str, bs: int = 32, n: int = 4, steps: int = 2000) -> None:
    """Where the serving thread's time goes in the shipped hooks: cProfile of ``steps`` steps, the
    functions with the most time of their own (cProfile inflates Python calls; read it as a ranking)."""
    import cProfile
    import pstats

    from eagle3_top.tracer.serving.deferred import Deferred
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    w = Workload(torch, dev, bs, n)
    pub = MemoryPublisher()
    tracer = Tracer(pub, aux_interval_s=1e9)  # type: ignore[arg-type]
    av, ap = _now_hooks(lambda _w: tracer)

    def verify(_self: Any, _batch: Any) -> Any:
        return w._r  # type: ignore[attr-defined]

    def process(_self: Any, _batch: Any, _result: Any) -> None:
        return None

    prof = cProfile.Profile()
    for k in range(steps):
        w._r = w.result()  # type: ignore[attr-defined]
        prof.enable()
        res = av(verify, None, w.batch)
        prof.disable()
        w.sglang_copy(res)
        prof.enable()
        ap(process, w.scheduler, w.batch, res)
        prof.disable()
        if k % 50 == 49:
            for _, body in pub.events:
                if isinstance(body, Deferred):
                    body.resolve()
            pub.events.clear()
    print(f"cProfile of the shipped hooks, batch {bs} x {n}, {steps} steps (own time):")
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)


def components(torch: Any) -> dict[str, float]:
    """What the pieces cost the calling thread on this host (CUDA only)."""
    from eagle3_top.tracer.serving import fingerprint_cuda as fc
    from eagle3_top.tracer.serving.fingerprint import fingerprint

    def per_call(fn: Any, n: int = 400) -> float:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
        return round(statistics.median(ts), 2)

    d = torch.randint(0, 1000, (128,), device="cuda")
    host = torch.empty(128, dtype=d.dtype, pin_memory=True)
    ev = torch.cuda.Event()
    x = torch.randn(128, 3 * 4096, device="cuda", dtype=torch.bfloat16)
    res = {
        "torch.cuda.is_current_stream_capturing()": per_call(torch.cuda.is_current_stream_capturing),
        "pinned.copy_(cuda, non_blocking=True), 128 int64": per_call(
            lambda: host.copy_(d, non_blocking=True)
        ),
        "event.record()": per_call(ev.record),
        "torch.empty(128, pin_memory=True)": per_call(lambda: torch.empty(128, pin_memory=True), 100),
        "torch.empty(4096) on cuda": per_call(lambda: torch.empty(4096, device="cuda")),
        "fingerprint() of [128, 12288] bf16 (launches + result copy)": per_call(
            lambda: fingerprint(x, 3), 100
        ),
    }
    if fc.available():
        small = torch.randn(3, 22, device="cuda")
        fhost = torch.empty(3, 22, pin_memory=True)
        res["triton launch: the result-copy kernel"] = per_call(lambda: fc.copy_to_host(small, fhost))
    for k, v in res.items():
        print(f"  {k:62s} {v:8.2f} us")
    return res


def _busy(torch: Any, dev: str, work: int) -> Any:
    a = torch.randn(256, device=dev)

    def run() -> None:
        for _ in range(work):
            a.mul_(1.0001)

    return run


def _partial_sender(encode_too: bool) -> Any:
    """A Publisher whose sender resolves (and encodes) each event but sends nothing: with the full
    one, it splits the sender's cost between its Python work and the socket."""
    from eagle3_top.tracer.schema import encode
    from eagle3_top.tracer.serving.deferred import Deferred
    from eagle3_top.tracer.serving.publisher import Publisher

    class Partial(Publisher):
        def _send(self, kind: str, seq: int, ts: float, body: Any) -> None:
            fields = body.resolve() if isinstance(body, Deferred) else body
            if encode_too:
                encode(kind, self.src, seq, ts, fields)
            self.sent += 1

    return Partial


def scheduler_loop(
    torch: Any, dev: str, quick: bool, bs: int = 32, n: int = 4, split: bool = False
) -> dict[str, Any]:
    """Iterations per second of a scheduler-like loop, rotating, round by round, through: tracer
    off; hooks on with the sender idle (events resolved between timed stretches, nothing sent); and
    hooks on with a real Publisher's sender busy (a subscriber process draining it), waking every
    20 ms and every 100 ms (the default). Off against hooks-only is the hooks' own cost; hooks-only
    against busy is the sender thread's share of the GIL."""
    from eagle3_top.hooks.sglang.verify import make_around_process_result, make_around_verify
    from eagle3_top.tracer.schema import SourceId
    from eagle3_top.tracer.serving.deferred import Deferred
    from eagle3_top.tracer.serving.publisher import MemoryPublisher, Publisher
    from eagle3_top.tracer.serving.tracer import Tracer

    w = Workload(torch, dev, bs, n)
    pubs = {
        "busy20": Publisher("tcp://127.0.0.1:0", SourceId.local(engine="bench"), flush_interval_s=0.02),
        "busy": Publisher("tcp://127.0.0.1:0", SourceId.local(engine="bench")),  # the default, 100 ms
        "ring": _ring_publisher(),  # the sender in a sidecar process (the SGLang plugin's default)
    }
    if split:  # the default sender, less its socket sends, less its encoding too
        pubs["encode_no_send"] = _partial_sender(True)("tcp://127.0.0.1:0", SourceId.local(engine="bench"))
        pubs["resolve_only"] = _partial_sender(False)("tcp://127.0.0.1:0", SourceId.local(engine="bench"))
    mem = MemoryPublisher()
    tracers = {name: Tracer(p, aux_interval_s=0.2) for name, p in pubs.items()}  # the plugin's default
    tracers["hooks"] = Tracer(mem, aux_interval_s=0.2)  # type: ignore[arg-type]
    for t in tracers.values():
        t.set_slot_width(4096)
    arm = ["off"]
    av = make_around_verify(lambda _w: tracers.get(arm[0]), hold=lambda: True)
    ap = make_around_process_result()
    ctx = mp.get_context("spawn")
    subs = []
    for p in pubs.values():
        stop, got = ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=drain_subscriber, args=(p.bound_endpoint, stop, got), daemon=True)
        proc.start()
        subs.append((stop, got, proc))
    time.sleep(1.5)
    # as much small device work per iteration as a small model's decode step takes (~1 ms), so the
    # events per second are a real server's, not a flood
    k = 8
    _busy(torch, dev, 200)()  # a cold device's first calls are slow: not what to size by
    while True:
        work = _busy(torch, dev, k)
        per = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(20):
                work()
            per.append((time.perf_counter() - t0) / 20)
        if statistics.median(per) >= 1e-3 or k > 1 << 16:
            break
        k *= 2
    verify = lambda _self, _batch: w._r  # noqa: E731
    process = lambda _self, _batch, _result: None  # noqa: E731

    def iterate(seconds: float) -> float:
        k, busy = 0, 0.0
        while busy < seconds:
            t1 = time.perf_counter()
            work()
            w._r = w.result()  # type: ignore[attr-defined]
            bare = arm[0] == "bare"  # no wrapper at all: what "off" (the hooks, no tracer) costs
            res = verify(None, w.batch) if bare else av(verify, None, w.batch)
            w.sglang_copy(res)
            if dev == "cuda":
                res.copy_done.synchronize()  # as SGLang's result processing does
            if bare:
                process(w.scheduler, w.batch, res)
            else:
                ap(process, w.scheduler, w.batch, res)
            k += 1
            busy += time.perf_counter() - t1
            if arm[0] == "hooks" and k % 50 == 0:  # the idle sender's work, outside the timed part
                for _, body in mem.events:
                    if isinstance(body, Deferred):
                        body.resolve()
                mem.events.clear()
        return k / busy

    arms: tuple[str, ...] = ("off", "bare", "hooks", "busy20", "busy", "ring")
    if split:
        arms += ("encode_no_send", "resolve_only")
    arm[0] = "busy"
    iterate(1.0)
    rounds, secs = (3, 0.5) if quick else (10, 1.0)
    rates: dict[str, list[float]] = {a: [] for a in arms}
    ratios: dict[str, list[float]] = {a: [] for a in arms[1:]}
    for r in range(rounds):
        order = arms[r % len(arms) :] + arms[: r % len(arms)]
        got_rate = {}
        for a in order:
            arm[0] = a
            got_rate[a] = iterate(secs)
            rates[a].append(got_rate[a])
        for a in arms[1:]:
            ratios[a].append(got_rate[a] / got_rate["off"])
    time.sleep(0.3)
    received = []
    for (stop, got, proc), p in zip(subs, pubs.values(), strict=True):
        stop.set()
        received.append(got.get(timeout=10))
        proc.join(5)
        p.close()
    res: dict[str, Any] = {"batch": bs, "rounds": rounds, "work_ops": k}
    for a in arms:
        res[f"it_per_s_{a}"] = round(statistics.median(rates[a]), 1)
    for a in arms[1:]:
        res[f"ratio_{a}_over_off"] = round(statistics.median(ratios[a]), 4)
    if split:
        print(
            "  the default sender split: resolve only "
            f"{res['ratio_resolve_only_over_off']:.4f}, resolve + encode {res['ratio_encode_no_send_over_off']:.4f}, "
            f"+ send {res['ratio_busy_over_off']:.4f}"
        )
    res["sent"] = [getattr(p, "sent", None) for p in pubs.values()]
    res["received"] = received
    res["dropped"] = [p.dropped for p in pubs.values()]
    res["errors"] = (
        sum(p.hook_errors + getattr(p, "encode_errors", 0) for p in pubs.values()) + mem.hook_errors
    )
    print(
        f"scheduler-like loop, batch {bs} x {n}, ~1 ms of device work per iteration, {rounds} rounds: "
        f"off {res['it_per_s_off']:.0f} it/s; no wrapper at all {res['ratio_bare_over_off']:.4f}; hooks on, sender idle "
        f"{res['ratio_hooks_over_off']:.4f}; sender busy {res['ratio_busy20_over_off']:.4f} (waking every "
        f"20 ms), {res['ratio_busy_over_off']:.4f} (every 100 ms); sender in a sidecar process "
        f"{res['ratio_ring_over_off']:.4f}; sent {res['sent']}, received "
        f"{received}, dropped {res['dropped']}"
    )
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also: cProfile of the shipped hooks")
    ap.add_argument("--split", action="store_true", help="loop arms: the sender without sends / encoding")
    ap.add_argument("--loop-only", action="store_true", help="only the scheduler-like loop")
    ap.add_argument("--check-only", action="store_true", help="only check the published steps")
    ap.add_argument("--hidden", type=int, default=4096, help="the target's hidden size (aux rows: 3 x it)")
    ns = ap.parse_args(argv)
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"# bench_serving_path on {dev}: {machine()}"
        + (f", {torch.cuda.get_device_name(0)}" if dev == "cuda" else "")
    )
    res: dict[str, Any] = {"device": dev, "machine": machine(), "torch": torch.__version__}
    res["checks"] = check_paths(torch, dev)
    if not all(res["checks"].values()):
        raise SystemExit("the shipped hooks published wrong steps: not timing them")
    if ns.check_only:
        return res
    if not ns.loop_only:
        if dev == "cuda":
            print("pieces, per call on this host:")
            res["components_us"] = components(torch)
        print("serving-thread time per verify step (verify wrapper + result hook), median of rounds:")
        res["host_us"] = host_times(torch, dev, ns.quick, ns.hidden)
    res["loop"] = scheduler_loop(torch, dev, ns.quick, split=ns.split)
    if ns.profile:
        profile_now(torch, dev)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
