"""Hostile frames for the fuzz tests: random bytes, random msgpack trees, and valid events of every
kind with one field swapped for something hostile. Deterministic for a seed."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
from eagle3_top.tracer.schema import AUX, HEALTH, HELLO, PROBE, STEP, encode, step_body
from eagle3_top.tracer.schema.health import Health
from eagle3_top.tracer.schema.hello import AuxWiring, Hello, ModelInfo, SpecConfig

ESCAPES = ("\x1b]0;pwned\x07", "\x1b[2J", "\x1b[31m", "\x9b2J", "\r", "\x00", "\u202e", "a" * 5000)
HOSTILE: tuple[Any, ...] = (
    None, True, -1, 0, 2**63 - 1, -(2**63), 2**64 - 1, math.nan, math.inf, -math.inf, 1e308,
    "", "x", *ESCAPES, b"", b"\xff" * 7, [], [1, 2], [[[[]]]], {}, {"a": 1}, {1: 2}, {"x": [None]},
)  # fmt: skip


def valid_events(rng: random.Random, src: str) -> list[tuple[str, dict[str, Any]]]:
    batch, n = rng.randint(0, 4), rng.randint(1, 6)
    draft = np.array([[rng.randrange(1, 500) for _ in range(n)] for _ in range(batch)], dtype=np.int32)
    lens = np.array([rng.randint(1, n) for _ in range(batch)], dtype=np.int32)
    tokens = np.arange(1, int(lens.sum()) + 1, dtype=np.int32)
    parents = np.tile(np.arange(-1, n - 1, dtype=np.int32), (batch, 1)) if rng.random() < 0.5 else None
    step = step_body(
        step=rng.randint(0, 9), rids=[f"r{i}" for i in range(batch)], draft=draft.reshape(batch, n),
        accept_lens=lens, tokens=tokens, topk=1, parents=parents, dt=0.01,
    )  # fmt: skip
    hello = Hello(
        engine="toy", engine_version="1", model=ModelInfo(target_path="/m", num_layers=8, hidden_size=64),
        requested=SpecConfig("EAGLE3", 3, 1, 4), effective=SpecConfig("EAGLE3", 3, 1, 4),
        aux=AuxWiring(declared_ids=[-1, 2, 5], ids_read=[-1, 2, 5], capture_native=[0, 3, 6],
                      capture_canonical=[-1, 2, 5], slots=3, width=192, expected_width=192),
    ).to_body()  # fmt: skip
    slots = 3
    aux = {
        "step": 1, "where": "fc_input", "rows": 8, "slots": slots, "slot_width": 64,
        "mean": [rng.gauss(0, 1) for _ in range(slots)], "rms": [rng.random() + 0.5 for _ in range(slots)],
        "std": [rng.random() for _ in range(slots)], "absmax": [rng.random() * 9 for _ in range(slots)],
        "nan": [0] * slots, "inf": [0] * slots,
        "sketch": [[rng.gauss(0, 1) for _ in range(16)] for _ in range(slots)],
    }  # fmt: skip
    probe = {"rid": "e3t-probe-0", "input_ids": b"\x01\x00\x00\x00" * 4, "rows": b"", "slots": 3, "width": 64}
    health = Health(sent=5, dropped=0, queue=0, queue_max=10).to_body()
    return [(HELLO, hello), (STEP, step), (AUX, aux), (PROBE, probe), (HEALTH, health)]


def _mutate(rng: random.Random, v: Any, depth: int = 0) -> Any:
    """One hostile change somewhere inside ``v``."""
    if isinstance(v, dict) and v and depth < 4 and rng.random() < 0.7:
        k = rng.choice(list(v))
        out = dict(v)
        if rng.random() < 0.15:
            del out[k]
        else:
            out[k] = _mutate(rng, v[k], depth + 1)
        return out
    if isinstance(v, list) and v and depth < 4 and rng.random() < 0.6:
        out_l = list(v)
        i = rng.randrange(len(v))
        out_l[i] = _mutate(rng, v[i], depth + 1)
        return out_l
    if isinstance(v, (bytes, bytearray)) and v and rng.random() < 0.5:
        b = bytearray(v)
        cut = rng.randrange(len(b) + 1)
        return bytes(b[:cut]) if rng.random() < 0.5 else bytes(b) + b"\x01"
    return rng.choice(HOSTILE)


def random_tree(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.4:
        return rng.choice(HOSTILE)
    if r < 0.7:
        return [random_tree(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(("v", "kind", "src", "seq", "ts", "batch", "n", "aux", "x")): random_tree(rng, depth + 1)
            for _ in range(rng.randint(0, 5))}  # fmt: skip


def frames(seed: int, count: int, sources: int = 4) -> Iterator[bytes]:
    """``count`` frames: a third random bytes or trees, the rest hostile variants of valid events."""
    rng = random.Random(seed)
    seqs: dict[str, int] = {}
    for i in range(count):
        r = rng.random()
        if r < 0.1:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
            continue
        if r < 0.2:
            yield msgpack.packb(random_tree(rng), use_bin_type=True)
            continue
        src = (
            f"host{rng.randrange(sources)}:{100 + rng.randrange(3)}:r0"
            if rng.random() < 0.97
            else rng.choice(ESCAPES)
        )
        seq = seqs[src] = seqs.get(src, -1) + 1
        kind, body = rng.choice(valid_events(rng, src))
        ts = rng.choice((1.7e9 + i, math.nan, math.inf, -1.0, 0))
        if r < 0.35:
            yield encode(kind, src, seq, ts, body)
            continue
        msg = {"v": 1, "kind": kind, "src": src, "seq": seq, "ts": ts, **body}
        msg = _mutate(rng, msg)
        try:
            yield msgpack.packb(msg, use_bin_type=True)
        except Exception:
            yield b"\xc1"
