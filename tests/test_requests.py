"""Per-request figures (tracer/analysis/requests.py) from real msgpack frames through the book."""

from __future__ import annotations

import copy

import numpy as np
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.requests import RequestTracker
from eagle3_top.tracer.schema import STEP, decode, encode
from stream_samples import LIFE, churn_rids, churn_step

SRC = "box:7:r0"


def _feed(book: EvidenceBook, steps: range, fold_every: int = 5) -> None:
    for i in steps:
        ev = decode(encode(STEP, SRC, i, 100.0 + i, churn_step(i)))
        book.ingest([ev], 100.0 + i * 0.1)
        if i % fold_every == 0:
            book.fold_requests()
    book.fold_requests()


def _row(table, rid: str) -> int:
    return table.rids.index(rid)


def test_each_request_is_counted_as_it_ran() -> None:
    book = EvidenceBook()
    _feed(book, range(60))
    t = book.sources[SRC].requests.table()
    # req5 ran LIFE steps (15..26), accepting 5 % 3 = 2 drafts each: accept length 3 per step
    j = _row(t, "req5")
    assert t.steps[j] == LIFE
    assert t.tokens[j] == LIFE * 3 and t.mean_accept_length[j] == 3.0
    assert t.last_len[j] == 3
    assert not t.in_flight[j]
    assert t.first_seen[j] == 100.0 + 15 * 0.1 and t.last_seen[j] == 100.0 + 26 * 0.1
    # the running ones are those of the last step
    running = {r for r, f in zip(t.rids, t.in_flight, strict=True) if f}
    assert running == set(churn_rids(59))
    # SGLang's health check is marked internal, users' requests are not
    assert t.internal[_row(t, "HEALTH_CHECK_5f3a")]
    assert not t.internal[j]


def test_folding_often_or_rarely_gives_the_same_figures() -> None:
    a, b = EvidenceBook(), EvidenceBook()
    _feed(a, range(50), fold_every=1)
    _feed(b, range(50), fold_every=1000)
    ta, tb = a.sources[SRC].requests.table(), b.sources[SRC].requests.table()
    assert ta.rids == tb.rids
    for col in ("steps", "tokens", "accepted", "last_len", "first_seen", "last_seen", "in_flight"):
        assert np.array_equal(getattr(ta, col), getattr(tb, col)), col


def test_memory_is_bounded_and_running_requests_are_kept() -> None:
    tracker = RequestTracker(max_requests=20)
    book = EvidenceBook()
    book.source(SRC).requests = tracker
    _feed(book, range(200))
    t = tracker.table()
    assert len(t) <= 20
    assert tracker.forgotten > 0
    assert set(churn_rids(199)) <= set(t.rids)  # never the ones still running


def test_a_watched_request_keeps_every_step_and_the_recent_ones_whole() -> None:
    book = EvidenceBook()
    _feed(book, range(20))
    tracker = book.sources[SRC].requests
    tracker.watch(["req4"])  # running since step 12: its recent steps are taken from the kept events
    _feed(book, range(20, 40))
    assert list(tracker.watched["req4"]) == [2] * LIFE  # 4 % 3 = 1 draft accepted: length 2
    steps = tracker.steps_of("req4")
    assert [ev.body["step"] for _, ev, _ in steps] == list(range(12, 24))
    tracker.watch([])
    assert not tracker.watched


def test_a_replay_checkpoint_copy_shares_the_events() -> None:
    book = EvidenceBook()
    _feed(book, range(30))
    clone = copy.deepcopy(book)
    a, b = book.sources[SRC].requests, clone.sources[SRC].requests
    assert a.table().rids == b.table().rids
    assert a.recent[0][1] is b.recent[0][1]  # shared, not copied
    _feed(clone, range(30, 40))
    assert len(b.table()) > len(a.table())  # the copy moves on alone


def test_odd_rids_off_the_wire_are_named_not_fatal() -> None:
    book = EvidenceBook()
    body = {**churn_step(3), "rids": [7, ["x"]]}
    ev = decode(encode(STEP, SRC, 0, 1.0, body))
    book.ingest([ev], 1.0)
    book.fold_requests()
    rids = book.sources[SRC].requests.table().rids
    assert len(rids) == 2 and all(isinstance(r, str) for r in rids)
