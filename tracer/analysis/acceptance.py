"""Acceptance statistics, counted the way people quote them: the one tally of the project.

Accept length per verify step = accepted draft tokens + 1 (the bonus token), as SGLang, vLLM and
the EAGLE papers count it (``schema.BONUS``). Per-position rates are kept both ways:
unconditional (accepted at position i / drafts that proposed position i, as vLLM) and conditional
(accepted at i given i-1 was accepted, comparable with SpecForge's training ``acc_i``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from eagle3_top.tracer.schema import BONUS

MAX_POSITIONS = 64


@dataclass(frozen=True)
class AcceptanceSummary:
    request_steps: int
    verify_steps: int
    mean_accept_length: float  # accepted + 1
    accept_rate: float  # accepted drafts / proposed drafts
    histogram: np.ndarray  # [max_len + 1] counts indexed by accept length (index 0 unused)
    unconditional: np.ndarray  # [positions] P(position i accepted), i = 1..
    conditional: np.ndarray  # [positions] P(i accepted | i-1 accepted)
    steps_per_s: float
    tokens_per_s: float
    history: list[float]  # mean accept length per second, oldest first


class AcceptanceStats:
    """Running counters fed with one step's per-request accepted counts at a time."""

    def __init__(self, history_s: int = 120, rate_window_s: float = 5.0) -> None:
        self.counts = np.zeros(MAX_POSITIONS + 1, dtype=np.int64)  # by accepted drafts
        self.proposed = np.zeros(MAX_POSITIONS + 1, dtype=np.int64)  # request-steps proposing position i
        self.request_steps = 0
        self.verify_steps = 0
        self.drafts_proposed = 0
        self.tokens = 0
        self._history_s = history_s
        self._rate_window_s = rate_window_s
        # per wall-clock second: [second, request_steps, sum_accept_len, verify_steps, tokens]
        self._buckets: deque[list[float]] = deque(maxlen=history_s + 1)
        # The running tallies as they stood when each of those seconds began: a window's figures
        # are the tallies now less those at its first second (two array copies a second, nothing
        # per step). (second, counts, proposed, request_steps, verify_steps, tokens, drafts_proposed)
        self._marks: deque[tuple[float, np.ndarray, np.ndarray, int, int, int, int]] = deque(
            maxlen=history_s + 1
        )

    def add(self, accepted: np.ndarray, n: int, ts: float, depth: int | None = None) -> None:
        """One verify step: ``accepted`` per request (drafts, bonus excluded), verify width ``n``."""
        self.add_many(accepted, n, ts, 1, depth)

    def add_many(self, accepted: np.ndarray, n: int, ts: float, steps: int, depth: int | None = None) -> None:
        """``steps`` verify steps of width ``n`` at about ``ts``, their per-request accepted counts
        concatenated: one numpy pass for a whole batch of events (the ingest path's fast lane).
        ``depth``: the positions a step proposes, for a draft tree (topk > 1) its depth; a chain
        proposes ``n - 1``."""
        b = int(accepted.size)
        if b == 0:
            return
        depth = min(max(n - 1 if depth is None else depth, 0), MAX_POSITIONS)
        sec = float(int(ts))
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append([sec, 0.0, 0.0, 0.0, 0.0])
            self._marks.append(
                (sec, self.counts.copy(), self.proposed.copy(), self.request_steps, self.verify_steps,
                 self.tokens, self.drafts_proposed)
            )  # fmt: skip
        self.counts += np.bincount(np.minimum(accepted, MAX_POSITIONS), minlength=MAX_POSITIONS + 1)
        self.proposed[1 : depth + 1] += b
        committed = int(accepted.sum()) + b * BONUS  # the request-steps' accept lengths, summed
        self.request_steps += b
        self.verify_steps += steps
        self.drafts_proposed += b * depth
        self.tokens += committed
        bucket = self._buckets[-1]
        bucket[1] += b
        bucket[2] += committed
        bucket[3] += steps
        bucket[4] += committed

    def summary(self, now: float, window_s: float | None = None) -> AcceptanceSummary:
        """Since the first step, or over the last ``window_s`` seconds (at most the history's):
        the seconds ``now - window_s`` < s <= ``now``, the one still filling included."""
        if window_s is None:
            counts, proposed = self.counts, self.proposed
            rs, vs, tokens, drafts = self.request_steps, self.verify_steps, self.tokens, self.drafts_proposed
        else:
            lo = int(now) - window_s
            mark = next((m for m in self._marks if m[0] > lo), None)
            if mark is None:  # no step in the window
                counts = proposed = np.zeros(MAX_POSITIONS + 1, dtype=np.int64)
                rs = vs = tokens = drafts = 0
            else:
                _, c0, p0, rs0, vs0, tok0, dr0 = mark
                counts, proposed = self.counts - c0, self.proposed - p0
                rs, vs = self.request_steps - rs0, self.verify_steps - vs0
                tokens, drafts = self.tokens - tok0, self.drafts_proposed - dr0
        # at_least[i] = request-steps with accepted >= i
        at_least = np.cumsum(counts[::-1])[::-1]
        last = int(np.max(np.nonzero(proposed)[0], initial=0))
        with np.errstate(divide="ignore", invalid="ignore"):
            uncond = np.where(
                proposed[1 : last + 1] > 0, at_least[1 : last + 1] / proposed[1 : last + 1], 0.0
            )
            cond = np.where(at_least[:last] > 0, at_least[1 : last + 1] / np.maximum(at_least[:last], 1), 0.0)
        hist = np.zeros(last + 2, dtype=np.int64)
        hist[1:] = counts[: last + 1]
        mean = tokens / rs if rs else 0.0
        rate = (tokens - rs) / drafts if drafts else 0.0
        steps_s, tok_s = self._rates(now)
        return AcceptanceSummary(
            request_steps=rs,
            verify_steps=vs,
            mean_accept_length=mean,
            accept_rate=float(rate),
            histogram=hist,
            unconditional=uncond.astype(float),
            conditional=cond.astype(float),
            steps_per_s=steps_s,
            tokens_per_s=tok_s,
            history=self.history(now),
        )

    @property
    def tokens_accepted(self) -> int:
        return self.tokens - self.request_steps

    @property
    def mean_accept_length(self) -> float | None:
        """Committed tokens per request-step (accept lengths, bonus included); None before any."""
        return self.tokens / self.request_steps if self.request_steps else None

    def _rates(self, now: float) -> tuple[float, float]:
        # Whole seconds only, and not the one still filling, so the rate does not saw-tooth.
        cur = float(int(now))
        lo = cur - self._rate_window_s
        steps = tokens = 0.0
        seconds = 0
        for sec, _, _, vs, tk in self._buckets:
            if lo <= sec < cur:
                steps += vs
                tokens += tk
        if self._buckets:
            first = max(self._buckets[0][0], lo)
            seconds = int(cur - first)
        if seconds <= 0:
            return 0.0, 0.0
        return steps / seconds, tokens / seconds

    def history(self, now: float) -> list[float]:
        """Mean accept length per second over the history window; 0 where nothing ran."""
        cur = int(now)
        out = [0.0] * self._history_s
        for sec, rs, al, _, _ in self._buckets:
            idx = self._history_s - 1 - (cur - int(sec))
            if 0 <= idx < self._history_s and rs:
                out[idx] = al / rs
        return out
