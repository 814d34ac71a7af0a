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


def test_a_refresh_between_steps_changes_no_figure() -> None:
    """The monitor asks for a summary every refresh while steps keep coming (the finished seconds
    are folded once and kept): every figure equals the one of a book nobody asked in between."""
    rng = np.random.default_rng(7)
    asked, quiet = (
        AcceptanceStats(rate_window_s=3, history_s=20),
        AcceptanceStats(rate_window_s=3, history_s=20),
    )
    t = 700.0
    for k in range(400):  # 40 s at 10 steps/s: the history window rolls over twice
        acc = rng.integers(0, 4, size=8).astype(np.int32)
        ts = t + k * 0.1
        asked.add(acc, n=4, ts=ts)
        quiet.add(acc, n=4, ts=ts)
        if k % 3 == 0:
            a = asked.summary(ts + 0.05)
            q = quiet.summary(ts + 0.05)
            assert (a.steps_per_s, a.tokens_per_s, a.history) == (q.steps_per_s, q.tokens_per_s, q.history)
            quiet._folded_key = None  # the other book folds every second again each time
    late = asked.summary(t + 45.2)  # 5 s after the last step: the rates fall, the history shifts
    fresh = AcceptanceStats(rate_window_s=3, history_s=20)
    fresh._buckets, fresh._marks = quiet._buckets, quiet._marks
    expect = fresh.summary(t + 45.2)
    assert late.history == expect.history and late.steps_per_s == expect.steps_per_s == 0.0
    assert sum(v > 0 for v in late.history) == 14  # seconds 726 – 739 of the 20 up to 745


def test_empty_is_zero_not_nan() -> None:
    s = AcceptanceStats().summary(now=10.0)
    assert s.mean_accept_length == 0.0 and s.accept_rate == 0.0 and s.steps_per_s == 0.0


def test_windows_answer_now_not_since_start() -> None:
    """Ninety seconds of a draft accepting everything, then ten of one accepting nothing: since
    start the figures still look good; over the last 10 s they show what the server does now."""
    st = AcceptanceStats()
    for t in range(90):
        st.add(np.array([3, 3]), 4, 1000.0 + t + 0.5)  # accept length 4 of 4
    for t in range(90, 100):
        st.add(np.array([0, 0]), 4, 1000.0 + t + 0.5)  # the bonus token only
    now = 1099.9
    whole, last10, last60 = st.summary(now), st.summary(now, 10), st.summary(now, 60)
    assert whole.request_steps == 200 and whole.mean_accept_length == pytest.approx((180 * 4 + 20) / 200)
    assert last10.request_steps == 20 and last10.verify_steps == 10
    assert last10.mean_accept_length == 1.0 and last10.accept_rate == 0.0
    assert list(last10.conditional) == [0.0, 0.0, 0.0] and list(last10.histogram) == [0, 20, 0, 0, 0]
    assert last60.request_steps == 120 and last60.mean_accept_length == pytest.approx((100 * 4 + 20) / 120)
    assert list(last60.unconditional) == pytest.approx([100 / 120] * 3)
    assert st.summary(now + 200, 10).request_steps == 0  # nothing in the last 10 s: no figures, not old ones


def test_a_draft_tree_counts_positions_by_depth() -> None:
    """topk 2, 3 steps, 8 tree nodes: a request accepts at most 3 drafts, so there are 3 positions,
    not the 7 a flat reading of the 8 nodes would make (with 4 of them never accepted)."""
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.schema import STEP, Event, row_depths, step_body

    parents = np.array([[-1, 0, 0, 1, 1, 2, 3, 4]] * 2, dtype=np.int32)  # depths 0 1 1 2 2 2 3 3
    draft = np.arange(1, 17, dtype=np.int32).reshape(2, 8)
    book = EvidenceBook()
    for i, acc in enumerate([[3, 1], [2, 0], [3, 3]]):
        a = np.array(acc, dtype=np.int32)
        body = step_body(
            step=i, rids=["a", "b"], draft=draft, accept_lens=a + 1, topk=2, parents=parents,
            tokens=np.arange(1, int(a.sum()) + 3, dtype=np.int32),
        )  # fmt: skip
        assert list(row_depths(parents)) == [3, 3]
        book.ingest([Event(STEP, "h:1:r0", i, 1000.0 + i, body)], 1000.0 + i)
    s = book.sources["h:1:r0"].acceptance.summary(1003.0)
    assert len(s.unconditional) == 3 and len(s.conditional) == 3
    # accepted drafts 3,1,2,0,3,3: at least 1 of 6 → 5, at least 2 → 4, at least 3 → 3
    assert list(s.unconditional) == pytest.approx([5 / 6, 4 / 6, 3 / 6])
    assert list(s.conditional) == pytest.approx([5 / 6, 4 / 5, 3 / 4])
    assert s.accept_rate == pytest.approx(12 / 18)  # 12 accepted of 6 requests x 3 positions
    not_a_tree = np.array([[-1, 2, 0, 1, 1, 2, 3, 4]] * 2, np.int32)  # node 1's parent after it
    assert list(row_depths(not_a_tree)) == [7, 7]  # read as a chain, as a step without parents
