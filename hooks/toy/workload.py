"""Synthetic token language for the toy EAGLE-3 engine (vocab 256).

Four kinds of segments are mixed, so that context beyond the last token matters:
copy a span after a separator; counting runs; ``a + b = (a+b) mod 10``; and a fixed
random grammar where the next token depends on the two before (85% deterministic).
Everything is deterministic from a seed.
"""

from __future__ import annotations

import random

import torch

VOCAB_SIZE = 256
BOS, COPY, SEP, COUNT, MATH, PLUS, EQ, GRAM = 0, 1, 2, 3, 4, 5, 6, 7
DIGIT0 = 10  # digits 10..19
COUNT_LO, COUNT_HI = 20, 100  # counting tokens 20..99
GRAM_LO, GRAM_HI = 100, 256  # grammar tokens 100..255
SPAN_LO = 20  # copy spans draw from 20..255
GRAMMAR_SEED = 1234
GRAMMAR_DETERMINISM = 0.85

_N_GRAM = GRAM_HI - GRAM_LO
_table: list[list[int]] | None = None


def grammar_table() -> list[list[int]]:
    """The fixed grammar: next = table[a][b] (grammar-local indices), independent of any seed."""
    global _table
    if _table is None:
        r = random.Random(GRAMMAR_SEED)
        _table = [[r.randrange(_N_GRAM) for _ in range(_N_GRAM)] for _ in range(_N_GRAM)]
    return _table


def _seg_copy(r: random.Random) -> list[int]:
    span = [r.randrange(SPAN_LO, VOCAB_SIZE) for _ in range(r.randint(4, 10))]
    return [COPY, *span, SEP, *span]


def _seg_count(r: random.Random) -> list[int]:
    n = COUNT_HI - COUNT_LO
    s = r.randrange(n)
    return [COUNT] + [COUNT_LO + (s + i) % n for i in range(r.randint(6, 16))]


def _seg_math(r: random.Random) -> list[int]:
    out = [MATH]
    for _ in range(r.randint(2, 4)):
        a, b = r.randrange(10), r.randrange(10)
        out += [DIGIT0 + a, PLUS, DIGIT0 + b, EQ, DIGIT0 + (a + b) % 10]
    return out


def _seg_gram(r: random.Random) -> list[int]:
    t = grammar_table()
    a, b = r.randrange(_N_GRAM), r.randrange(_N_GRAM)
    seq = [a, b]
    for _ in range(r.randint(10, 30)):
        c = t[seq[-2]][seq[-1]] if r.random() < GRAMMAR_DETERMINISM else r.randrange(_N_GRAM)
        seq.append(c)
    return [GRAM] + [GRAM_LO + x for x in seq]


_SEGMENTS = (_seg_copy, _seg_count, _seg_math, _seg_gram)


def make_sequence(length: int, r: random.Random) -> list[int]:
    """One sequence of exactly ``length`` tokens: BOS then random segments."""
    out = [BOS]
    while len(out) < length:
        out += r.choice(_SEGMENTS)(r)
    return out[:length]


def make_sequences(n: int, length: int, seed: int) -> torch.Tensor:
    r = random.Random(seed)
    return torch.tensor([make_sequence(length, r) for _ in range(n)], dtype=torch.long)


def sequence_stream(batch: int, length: int, seed: int):
    """Endless iterator of ``[batch, length]`` training batches, deterministic from ``seed``."""
    r = random.Random(seed)
    while True:
        yield torch.tensor([make_sequence(length, r) for _ in range(batch)], dtype=torch.long)


PROMPT_SEED_OFFSET = 1_000_003  # keeps serving prompts apart from training sequences


def prompt_stream(length: int = 48, seed: int = 0):
    """Endless iterator of prompts (lists of ``length`` tokens); its first ``n`` items are exactly
    ``make_prompts(n, length, seed)``."""
    r = random.Random(seed + PROMPT_SEED_OFFSET)
    while True:
        yield make_sequence(length, r)


def make_prompts(n: int, length: int = 48, seed: int = 0) -> torch.Tensor:
    """The engine's default workload: ``n`` prompts of ``length`` tokens (``[n, length]``)."""
    it = prompt_stream(length, seed)
    return torch.tensor([next(it) for _ in range(n)], dtype=torch.long)
