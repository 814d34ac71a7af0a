"""Shared helpers for benchmarks: realistic payloads and a best-of timer."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


@dataclass
class StepArrays:
    """One verify step as the tracer holds it on the host: batch x n draft tokens, root first."""

    rids: list[str]
    draft: np.ndarray
    accepted: np.ndarray
    tokens: np.ndarray


def step_arrays(batch: int = 64, n: int = 16, seed: int = 0) -> StepArrays:
    rng = np.random.default_rng(seed)
    draft = rng.integers(1, 150_000, (batch, n))
    accepted = rng.integers(0, n, batch).astype(np.int32)
    bonus = rng.integers(1, 150_000, batch)
    tokens = np.concatenate([np.append(draft[i, 1 : 1 + accepted[i]], bonus[i]) for i in range(batch)])
    rids = [f"{int(x):016x}" for x in rng.integers(1 << 62, size=batch)]
    return StepArrays(rids, draft, accepted, tokens)


def best_of(fn: Callable[[], object], repeat: int = 5, number: int = 200) -> float:
    """Best seconds per call over ``repeat`` rounds of ``number`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def drain_subscriber(endpoint: str, stop: Any, out: Any) -> None:
    """A subscriber process's body: receive everything from ``endpoint`` until ``stop`` (an
    ``mp.Event``) is set, then put the count on ``out`` (an ``mp.Queue``)."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.connect(endpoint)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    n = 0
    while not stop.is_set():
        if sock.poll(100):
            sock.recv()
            n += 1
    out.put(n)
