"""The evidence book and the snapshots the monitor draws: acceptance numbers, batched ingest,
malformed steps, proposals, staleness, bounds."""

from __future__ import annotations

import time

import numpy as np
import pytest
from eagle3_top.tracer.analysis.acceptance import AcceptanceStats
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.schema import HEALTH, HELLO, STEP, decode, encode, step_body
from eagle3_top.tui.snapshot import Snapshot, take_snapshot

SRC = "hostA:123:r0"


def step_event(
    seq, accepted, n, *, src=SRC, rng=None, parents=None, draft=None, tokens=None, body_patch=None
):
    rng = rng or np.random.default_rng(seq)
    acc = np.asarray(accepted, dtype=np.int32)
    b = acc.size
    if draft is None:
        draft = rng.integers(1, 30_000, (b, n)).astype(np.int32)
    if tokens is None:
        tokens = rng.integers(1, 30_000, int(acc.sum()) + b).astype(np.int32)
    body = step_body(
        step=seq,
        rids=[f"r{i}" for i in range(b)],
        draft=draft,
        accept_lens=acc + 1,
        tokens=tokens,
        parents=parents,
    )
    if body_patch:
        body.update(body_patch)
    return decode(encode(STEP, src, seq, time.time(), body))


def snap(book: EvidenceBook, now: float, stale_after_s: float = 3.0) -> Snapshot:
    return take_snapshot(book, {}, now, stale_after_s=stale_after_s)


def test_conditional_vs_unconditional_per_position():
    st = EvidenceBook()
    # n = 4: three draft positions. accepted per request-step:
    acc = [0, 1, 2, 3, 3, 1]
    st.ingest([step_event(0, acc[:3], 4), step_event(1, acc[3:], 4)], now=1000.0)
    s = snap(st, 1000.5).sources[0].summary
    # at least 1 accepted: 5 of 6; at least 2: 3; all 3: 2
    assert s.unconditional == pytest.approx([5 / 6, 3 / 6, 2 / 6])
    assert s.conditional == pytest.approx([5 / 6, 3 / 5, 2 / 3])
    assert s.mean_accept_length == pytest.approx(sum(acc) / 6 + 1)  # accepted + 1 (bonus)
    assert s.accept_rate == pytest.approx(sum(acc) / (6 * 3))
    assert s.verify_steps == 2
    assert list(s.histogram[1:]) == [1, 2, 1, 2]  # accept lengths 1..4


def test_batched_ingest_matches_one_add_per_step():
    rng = np.random.default_rng(7)
    evs, ref = [], AcceptanceStats()
    for i in range(300):
        n = 6 if i % 3 else 9  # two widths interleaved: two groups
        acc = rng.integers(0, n, 16)
        evs.append(step_event(i, acc, n, rng=rng))
        ref.add(acc.astype(np.int32), n, 1000.0)
    st = EvidenceBook()
    assert st.ingest(evs, now=1000.0) == 300
    got, want = snap(st, 1000.2).sources[0].summary, ref.summary(1000.2)
    assert got.verify_steps == want.verify_steps == 300
    assert got.request_steps == want.request_steps
    assert got.mean_accept_length == pytest.approx(want.mean_accept_length)
    assert np.array_equal(got.histogram, want.histogram)
    assert got.unconditional == pytest.approx(want.unconditional)
    assert got.conditional == pytest.approx(want.conditional)


def test_malformed_steps_are_counted_once_and_good_ones_kept():
    bad_reasons: list[str] = []
    good = [step_event(i, [1, 2], 4) for i in range(3)]
    out_of_range = step_event(3, [1, 7], 4)  # accepted >= n: caught by the group value check
    short_draft = step_event(4, [1, 1], 4, body_patch={"draft": b"\x00" * 12})  # caught per event
    wrong_tokens = step_event(5, [1, 1], 4, body_patch={"tokens": b"\x01\x00\x00\x00" * 3})
    st = EvidenceBook()
    used = st.ingest(
        [good[0], out_of_range, good[1], short_draft, wrong_tokens, good[2]], 1000.0, bad_reasons.append
    )
    assert used == 3
    assert st.step_errors == 3 and len(bad_reasons) == 3
    assert any("accepted" in r for r in bad_reasons) and any("draft" in r for r in bad_reasons)
    src = snap(st, 1000.1).sources[0]
    assert src.steps == 3 and src.step_errors == 3
    assert src.summary.mean_accept_length == pytest.approx(2.5)
    assert src.proposals and src.proposals[0].accepted == 1  # latest valid step is shown


def test_chain_proposals_accepted_prefix_and_bonus():
    draft = np.array([[5, 11, 12, 13, 14], [6, 21, 22, 23, 24]], dtype=np.int32)
    tokens = np.array([11, 12, 99, 77], dtype=np.int32)  # r0: 2 accepted + bonus 99; r1: bonus 77
    st = EvidenceBook()
    st.ingest([step_event(0, [2, 0], 5, draft=draft, tokens=tokens)], 1000.0)
    rows = snap(st, 1000.0).sources[0].proposals
    assert rows[0].root == 5 and rows[0].proposals == (11, 12, 13, 14)
    assert rows[0].accepted_mask == (True, True, False, False) and rows[0].bonus == 99
    assert rows[1].accepted_mask == (False,) * 4 and rows[1].bonus == 77


def test_tree_proposals_follow_the_accepted_path():
    # root 0 -> children 1 (tok 10), 2 (tok 20); node 2 -> child 3 (tok 30), node 1 -> child 4 (tok 40)
    draft = np.array([[1, 10, 20, 30, 40]], dtype=np.int32)
    parents = np.array([[-1, 0, 0, 2, 1]], dtype=np.int32)
    tokens = np.array([20, 30, 55], dtype=np.int32)
    st = EvidenceBook()
    st.ingest([step_event(0, [2], 5, draft=draft, tokens=tokens, parents=parents)], 1000.0)
    row = snap(st, 1000.0).sources[0].proposals[0]
    assert row.tree and row.accepted_mask == (False, True, True, False) and row.bonus == 55


def test_hello_health_stale_and_identity():
    st = EvidenceBook()
    hello = decode(encode(HELLO, SRC, 0, 1.0, {"engine": {"name": "sglang", "version": "0.5.23"}}))
    health = decode(encode(HEALTH, SRC, 1, 1.0, {"dropped": 4, "queue": 2}))
    st.ingest([hello, health], now=1000.0)
    s = snap(st, 1002.0).sources[0]
    assert (s.host, s.pid, s.rank, s.engine) == ("hostA", "123", "r0", "sglang")
    assert s.name == "hostA:123:r0 sglang" and s.health.dropped == 4 and not s.stale
    assert snap(st, 1003.5).sources[0].stale


def test_memory_is_bounded():
    st = EvidenceBook(max_sources=4)
    for i in range(10):
        st.ingest([step_event(i, [1] * 64, 16, src=f"h:{i}:r0")], now=1000.0 + i)
    assert len(st.sources) == 4 and st.dropped_sources == 6
    assert sorted(st.sources) == [f"h:{i}:r0" for i in range(6, 10)]
    # only the latest step's event is kept per source
    one = st.sources["h:9:r0"]
    assert one.last_step_event is not None and one.last_step_event.seq == 9


def test_ingest_is_fast_enough():
    rng = np.random.default_rng(0)
    frames = [
        encode(
            STEP,
            SRC,
            i,
            0.0,
            step_body(
                step=i,
                rids=[f"q{j}" for j in range(64)],
                draft=rng.integers(1, 30_000, (64, 16)).astype(np.int32),
                accept_lens=(acc := rng.integers(0, 16, 64).astype(np.int32)) + 1,
                tokens=rng.integers(1, 30_000, int(acc.sum()) + 64).astype(np.int32),
            ),
        )
        for i in range(64)
    ] * 40
    st = EvidenceBook()
    t0 = time.perf_counter()
    for k in range(0, len(frames), 256):
        st.ingest([decode(f) for f in frames[k : k + 256]], now=1000.0)
    rate = len(frames) / (time.perf_counter() - t0)
    assert snap(st, 1000.0).sources[0].steps == len(frames)
    assert rate > 5_000, rate  # ~40k/s on an idle core; generous for a loaded CI box


@pytest.mark.parametrize(
    "hello",
    [
        {},
        {"engine": None, "model": "x", "tp": [], "spec": None, "aux": None},
        {"spec": {"requested": None, "effective": {"topk": 1}, "rewrites": 3}, "aux": [1, 2]},
        {"spec": {"rewrites": ["bad", {"param": "topk"}]}, "aux": {"capture_native": None, "ids_read": []}},
        {"engine": {"name": 5}, "model": {"num_layers": "many"}, "aux": {"width": 10, "expected_width": 12}},
    ],
)
def test_widgets_render_any_hello_shape(hello):
    from eagle3_top.tui.health_panel import render_health
    from eagle3_top.tui.histogram import render_histogram
    from eagle3_top.tui.position_bars import render_positions
    from eagle3_top.tui.proposals import render_proposals
    from eagle3_top.tui.spec_panel import render_spec

    st = EvidenceBook()
    st.ingest(
        [
            decode(encode(HELLO, SRC, 0, 1.0, hello)),
            decode(encode(HEALTH, SRC, 1, 1.0, {"queue": "?"})),
            step_event(2, [0, 3], 4),
        ],
        now=1000.0,
    )
    snapshot = snap(st, 1000.0)
    src = snapshot.sources[0]
    for text in (
        render_spec(src, 48),
        render_positions(src, 48, 9),
        render_histogram(src, 48, 6),
        render_proposals(src, 100),
        render_health(src, snapshot, 100),
    ):
        assert text.plain


def test_diagnoses_of_evicted_sources_are_forgotten():
    """A publisher inventing a source per hello must not grow the monitor's memory: when the book
    evicts a source, the diagnoser drops it and tells the feed to drop its findings."""
    from eagle3_top.tracer.analysis.diagnosis import Diagnoser

    book, diag = EvidenceBook(max_sources=4), Diagnoser()
    results: dict = {}
    for i in range(10):
        src = f"h:{i}:r0"
        book.ingest([decode(encode(HELLO, src, 0, 1.0, {"engine": {"name": "x"}}))], now=1000.0 + i)
        fresh, gone = diag.run(book, 1000.0 + i)
        results.update(fresh)
        for key in gone:
            del results[key]
        assert src in fresh
    assert sorted(results) == sorted(book.sources) == [f"h:{i}:r0" for i in range(6, 10)]
