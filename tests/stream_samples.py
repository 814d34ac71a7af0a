"""Realistic frames for tests: a hello like a served EAGLE-3 engine's, and verify steps whose
acceptance follows a known pattern, encoded as real msgpack frames of the v1 schema."""

from __future__ import annotations

import numpy as np
from eagle3_top.tracer.reader.recording import RecordingWriter
from eagle3_top.tracer.schema import (
    HELLO,
    STEP,
    AuxWiring,
    DraftClaims,
    Hello,
    ModelInfo,
    SpecConfig,
    encode,
    step_body,
)


def hello(claims: DraftClaims | None = None) -> Hello:
    spec = SpecConfig("EAGLE3", 3, 1, 4)
    return Hello(
        engine="test", engine_version="1",
        model=ModelInfo(target_path="/t", draft_path="/d", num_layers=8, hidden_size=64),
        requested=spec, effective=spec, claims=claims,
        aux=AuxWiring(declared_ids=[-1, 3, 4], ids_location="eagle_config", ids_read=[-1, 3, 4],
                      capture_native=[0, 4, 5], capture_canonical=[-1, 3, 4], family="llama", slots=3,
                      width=192, expected_width=192),
    )  # fmt: skip


def step(i: int, batch: int = 4, max_accept: int = 3) -> dict[str, object]:
    """Step ``i``: accepted drafts per request drawn from 0..max_accept-1, seeded by ``i``."""
    rng = np.random.default_rng(i)
    acc = rng.integers(0, max_accept, batch).astype(np.int32)
    return step_body(
        step=i, rids=[f"req{r}" for r in range(batch)],
        draft=rng.integers(1, 30_000, (batch, 4)).astype(np.int32), accept_lens=acc + 1,
        tokens=rng.integers(1, 30_000, int(acc.sum()) + batch).astype(np.int32),
    )  # fmt: skip


LIFE = 12  # steps each request of ``churn_step`` runs


def churn_rids(i: int) -> list[str]:
    """The requests running at step ``i`` of a server that admits one every third step and runs
    each for LIFE steps; SGLang's health check joins step 30 for that one step."""
    first = max(0, (i - LIFE) // 3 + 1)
    rids = [f"req{r}" for r in range(first, i // 3 + 1)]
    return rids + ["HEALTH_CHECK_5f3a"] if i == 30 else rids


def churn_step(i: int, max_accept: int = 3) -> dict[str, object]:
    """Step ``i`` of the churning server: request r accepts ``r % max_accept`` drafts every step,
    so each request's figures are known in advance."""
    rids = churn_rids(i)
    acc = np.array([int(r[3:]) % max_accept if r.startswith("req") else 0 for r in rids], np.int32)
    rng = np.random.default_rng(i)
    return step_body(
        step=i, rids=rids, draft=rng.integers(1, 256, (len(rids), 4)).astype(np.int32),
        accept_lens=acc + 1, tokens=rng.integers(1, 256, int(acc.sum()) + len(rids)).astype(np.int32),
    )  # fmt: skip


T0_NS = 1_780_000_000 * 10**9  # a fixed start, so that times in a test read the same every run


def write_session(
    path: str,
    seconds: int = 20,
    steps_per_s: int = 10,
    src: str = "box:7:r0",
    endpoint: str = "tcp://box:5557",
    churn: bool = False,
) -> int:
    """A session recorded as ``eagle3-top record`` stores it: a hello each second, steps at a steady
    rate, acceptance falling halfway (a draft that got worse: the figures differ by position in
    time); with ``churn``, requests come and go as ``churn_step`` has them. One receive time per
    frame. The number of frames written."""
    w = RecordingWriter(path, flush_interval_s=0.0)
    seq = n = 0
    h = hello().to_body()
    for s in range(seconds):
        for k in range(steps_per_s + 1):
            t_ns = T0_NS + s * 10**9 + k * (10**9 // (steps_per_s + 1))
            if k == 0:
                frame = encode(HELLO, src, seq, t_ns / 1e9, h)
            else:
                i = s * steps_per_s + k
                body = churn_step(i) if churn else step(i, max_accept=4 if s < seconds // 2 else 2)
                frame = encode(STEP, src, seq, t_ns / 1e9, body)
            w.add(frame, endpoint, t_ns)
            seq += 1
            n += 1
        w.tick()  # with no flush interval, every tick closes the chunk
    w.close()
    return n
