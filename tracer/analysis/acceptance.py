"""Acceptance statistics, counted the way people quote them: the one tally of the project.

Accept length per verify step = accepted draft tokens + 1 (the bonus token), as SGLang, vLLM and
the EAGLE papers count it (``schema.BONUS``). Per-position rates are kept both ways:
unconditional (accepted at position i / drafts that proposed position i, as vLLM) and conditional
(accepted at i given i-1 was accepted, comparable with SpecForge's training ``acc_i``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

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
    # [positions] request-steps that proposed position i: with ``histogram``, the counts that merge
    # across sources (the rates above do not: a fleet's rate is not the mean of its sources')
    proposed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class AcceptanceStats:
    """Running counters fed with one step's per-request accepted counts at a time."""

    def __init__(self, history_s: int = 120, rate_window_s: float = 5.0) -> None:
        self.counts = np.zeros(MAX_POSITIONS + 1, dtype=np.int64)  # by accepted drafts
        self.proposed = np.zeros(MAX_POSITIONS + 1, dtype=np.int64)  # request-steps proposing position i
        self.request_steps = 0
        self.verify_steps = 0
        self.drafts_proposed = 0
        self.tokens = 0
        self.deepest = 0  # the deepest position any step proposed: the last with proposed > 0
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
        self._folded_key: tuple[float, int, float, float] | None = None
        self._folded: tuple[float, float, list[float]] = (0.0, 0.0, [])

    def add(self, accepted: np.ndarray, n: int, ts: float, depths: np.ndarray | None = None) -> None:
        """One verify step: ``accepted`` per request (drafts, bonus excluded), verify width ``n``."""
        self.add_many(accepted, n, ts, 1, depths)

    def add_many(
        self, accepted: np.ndarray, n: int, ts: float, steps: int, depths: np.ndarray | None = None
    ) -> None:
        """``steps`` verify steps of width ``n`` at about ``ts``, their per-request accepted counts
        concatenated: one numpy pass for a whole batch of events (the ingest path's fast lane).
        ``depths``: per request-step, the positions it proposed, for a draft tree (topk > 1) its
        row's depth (``schema.step_depths``); a chain proposes ``n - 1``."""
        b = int(accepted.size)
        if b == 0:
            return
        chain = min(max(n - 1, 0), MAX_POSITIONS)
        deepest = chain if depths is None else min(int(depths.max()), MAX_POSITIONS)
        sec = float(int(ts))
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append([sec, 0.0, 0.0, 0.0, 0.0])
            self._marks.append(
                (sec, self.counts.copy(), self.proposed.copy(), self.request_steps, self.verify_steps,
                 self.tokens, self.drafts_proposed)
            )  # fmt: skip
        self.counts += np.bincount(np.minimum(accepted, MAX_POSITIONS), minlength=MAX_POSITIONS + 1)
        if depths is None:
            self.proposed[1 : chain + 1] += b
            self.drafts_proposed += b * chain
        else:  # rows proposing position i: those at least i deep
            capped = np.minimum(depths, MAX_POSITIONS)
            self.proposed[1:] += np.bincount(capped, minlength=MAX_POSITIONS + 1)[::-1].cumsum()[::-1][1:]
            self.drafts_proposed += int(capped.sum())
        if deepest > self.deepest:
            self.deepest = deepest
        committed = int(accepted.sum()) + b * BONUS  # the request-steps' accept lengths, summed
        self.request_steps += b
        self.verify_steps += steps
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
        at_least = counts[::-1].cumsum()[::-1]
        if window_s is None:
            last = self.deepest
        else:
            nz = proposed.nonzero()[0]
            last = int(nz[-1]) if nz.size else 0
        # No np.where/errstate: accepting at i needs i proposed and i-1 accepted, so a zero
        # denominator always has a zero numerator and max(d, 1) gives the same 0 (and a fleet's
        # snapshot takes 64 of these every refresh).
        reached = at_least[1 : last + 1]
        uncond = reached / np.maximum(proposed[1 : last + 1], 1)
        cond = reached / np.maximum(at_least[:last], 1)
        hist = np.zeros(last + 2, dtype=np.int64)
        hist[1:] = counts[: last + 1]
        mean = tokens / rs if rs else 0.0
        rate = (tokens - rs) / drafts if drafts else 0.0
        steps_s, tok_s, history = self._per_second(now)
        return AcceptanceSummary(
            request_steps=rs,
            verify_steps=vs,
            mean_accept_length=mean,
            accept_rate=float(rate),
            histogram=hist,
            unconditional=uncond,
            conditional=cond,
            steps_per_s=steps_s,
            tokens_per_s=tok_s,
            history=history,
            proposed=proposed[1 : last + 1].copy(),
        )

    @property
    def tokens_accepted(self) -> int:
        return self.tokens - self.request_steps

    @property
    def mean_accept_length(self) -> float | None:
        """Committed tokens per request-step (accept lengths, bonus included); None before any."""
        return self.tokens / self.request_steps if self.request_steps else None

    def _per_second(self, now: float) -> tuple[float, float, list[float]]:
        """Steps/s and tokens/s over the rate window, and the history (mean accept length per second,
        0 where nothing ran). Only the newest second still fills: the fold over the others is kept
        until a second begins or ``now`` moves to another, so a refresh costs one bucket, not 120."""
        # Rates over whole seconds only, not the one still filling, so they do not saw-tooth.
        cur = float(int(now))
        lo = cur - self._rate_window_s
        hist_s = self._history_s
        buckets = self._buckets
        if not buckets:
            return 0.0, 0.0, [0.0] * hist_s
        key = (cur, len(buckets), buckets[0][0], buckets[-1][0])
        if self._folded_key != key:
            steps = tokens = 0.0
            history = [0.0] * hist_s
            for i in range(len(buckets) - 1):
                steps, tokens = _fold(history, cur, lo, buckets[i], steps, tokens)
            self._folded, self._folded_key = (steps, tokens, history), key
        steps, tokens, history = self._folded
        history = history.copy()
        steps, tokens = _fold(history, cur, lo, buckets[-1], steps, tokens)
        seconds = int(cur - max(buckets[0][0], lo))
        if seconds <= 0:
            return 0.0, 0.0, history
        return steps / seconds, tokens / seconds, history

    def history(self, now: float) -> list[float]:
        """Mean accept length per second over the history window; 0 where nothing ran."""
        return self._per_second(now)[2]


def _fold(
    history: list[float], cur: float, lo: float, bucket: list[float], steps: float, tokens: float
) -> tuple[float, float]:
    """One second's bucket into the rates' sums (when in the rate window) and into ``history``."""
    sec, rs, al, vs, tk = bucket
    if lo <= sec < cur:
        steps += vs
        tokens += tk
    idx = len(history) - 1 - int(cur - sec)
    if 0 <= idx < len(history) and rs:
        history[idx] = al / rs
    return steps, tokens
