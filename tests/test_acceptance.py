"""Acceptance counted as people quote it: accept length = accepted + 1, both per-position rates."""

from __future__ import annotations

import numpy as np
import pytest
from eagle3_top.tracer.analysis.acceptance import AcceptanceStats


def test_known_counts() -> None:
    st = AcceptanceStats()
    # 4 requests, chain of 3 drafts (n=4): accepted 0, 1, 2, 3
    st.add(np.array([0, 1, 2, 3], dtype=np.int32), n=4, ts=1000.2)
    st.add(np.array([3, 3, 0, 1], dtype=np.int32), n=4, ts=1000.7)
    s = st.summary(now=1001.5)
    acc = np.array([0, 1, 2, 3, 3, 3, 0, 1])
    assert s.mean_accept_length == pytest.approx((acc + 1).mean())
    assert s.accept_rate == pytest.approx(acc.sum() / (8 * 3))
    # unconditional: P(accepted >= i)
    np.testing.assert_allclose(s.unconditional, [(acc >= i).mean() for i in (1, 2, 3)])
    # conditional: P(accepted >= i | accepted >= i-1)
    np.testing.assert_allclose(s.conditional, [(acc >= i).sum() / (acc >= i - 1).sum() for i in (1, 2, 3)])
    assert s.histogram.tolist() == [0, 2, 2, 1, 3]
    assert s.verify_steps == 2 and s.request_steps == 8
    assert s.history[-2] == pytest.approx((acc + 1).mean())


def test_rates_use_whole_seconds() -> None:
    st = AcceptanceStats(rate_window_s=2)
    for k in range(40):
        st.add(np.array([1, 2], dtype=np.int32), n=4, ts=500 + k * 0.1)  # 10 steps/s, 50 tokens/s
    s = st.summary(now=504.05)
    assert s.steps_per_s == pytest.approx(10)
    assert s.tokens_per_s == pytest.approx(50)


def test_empty_is_zero_not_nan() -> None:
    s = AcceptanceStats().summary(now=10.0)
    assert s.mean_accept_length == 0.0 and s.accept_rate == 0.0 and s.steps_per_s == 0.0
