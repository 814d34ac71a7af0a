"""Is speculation paying off? Committed tokens per second against the same server's rate without
speculation (a baseline the user measured), and the accept length that would break even.

At the verify-step rate measured, committed tokens/s grow with the accept length (each verify
step commits ``accept length`` tokens per request), so the break-even accept length is the
measured one scaled by ``baseline / measured``. Both rates must come from comparable load (the
same batch sizes): the baseline is the user's word, and the finding says which figures it compares.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_top.tracer.analysis.acceptance import AcceptanceStats, AcceptanceSummary
from eagle3_top.tracer.analysis.findings import ERROR, Finding
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS

# The accept length is taken over the last seconds, as the tok/s rate is (its last 5 whole seconds):
# the two must describe the same traffic for the break-even length to mean anything.
WINDOW_S = 10


@dataclass(frozen=True)
class Payoff:
    baseline_tok_s: float
    tok_s: float
    speedup: float  # measured / baseline
    break_even_accept_length: float  # the accept length at which speculation would match the baseline
    accept_length: float


def payoff_now(stats: AcceptanceStats, now: float, baseline_tok_s: float | None) -> Payoff | None:
    return None if not baseline_tok_s else payoff(stats.summary(now, WINDOW_S), baseline_tok_s)


def payoff(s: AcceptanceSummary, baseline_tok_s: float | None) -> Payoff | None:
    """None without a baseline, or before there is a rate to compare."""
    if not baseline_tok_s or baseline_tok_s <= 0 or s.tokens_per_s <= 0 or not s.request_steps:
        return None
    speedup = s.tokens_per_s / baseline_tok_s
    return Payoff(
        baseline_tok_s, s.tokens_per_s, speedup, s.mean_accept_length / speedup, s.mean_accept_length
    )


def payoff_finding(
    key: str,
    stats: AcceptanceStats,
    now: float,
    baseline_tok_s: float | None,
    min_request_steps: int = THRESHOLDS.min_request_steps,
) -> Finding | None:
    p = payoff_now(stats, now, baseline_tok_s)
    if p is None or stats.request_steps < min_request_steps or p.speedup >= 1.0:
        return None
    return Finding(
        "SPECULATION_SLOWER_THAN_BASELINE",
        ERROR,
        f"{p.tok_s:,.1f} tok/s against {p.baseline_tok_s:,.1f} without speculation (x{p.speedup:.2f}); at "
        f"this verify-step rate the accept length must reach {p.break_even_accept_length:.2f} to break "
        f"even (it is {p.accept_length:.2f})",
        "fix any wiring finding first; if there is none, serve without speculation (or with fewer draft "
        "tokens) until acceptance reaches the break-even length; compare at the same load",
        key,
        {
            "tok_s": p.tok_s, "baseline_tok_s": p.baseline_tok_s, "speedup": p.speedup,
            "break_even_accept_length": p.break_even_accept_length, "accept_length": p.accept_length,
            "request_steps": stats.request_steps, "window_s": WINDOW_S,
            "brief": f"{p.tok_s:,.1f} tok/s against {p.baseline_tok_s:,.1f} without speculation",
        },
    )  # fmt: skip
