"""The monitor and `check` next to publishers they do not control: fuzzed frames, escape sequences,
floods of invented sources, restarts and spoofed counters. Every bad frame is counted and named,
nothing raises, memory stays bounded, and losses are counted by kind."""

from __future__ import annotations

import math
import time
import tracemalloc

import msgpack
import numpy as np
import pytest
import zmq
from conftest import PATIENCE_S, screen_text, wait_connected, wait_until
from eagle3_top.tracer.analysis.diagnose import diagnose
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import HEALTH, HELLO, STEP, SourceId, decode, encode, step_body
from eagle3_top.tracer.schema.text import printable
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tui.snapshot import take_snapshot
from fuzz_frames import frames


def offline_subscriber() -> Subscriber:
    """A real Subscriber whose socket we never read: frames go through decode_frame."""
    return Subscriber([], context=zmq.Context.instance())


def test_100k_fuzzed_frames_are_counted_never_raised() -> None:
    sub = offline_subscriber()
    book = EvidenceBook(max_sources=64)
    total = decoded = 0
    try:
        batch = []
        for f in frames(seed=12, count=100_000):
            total += 1
            ev = sub.decode_frame(f)
            if ev is not None:
                decoded += 1
                batch.append(ev)
            if len(batch) == 64:
                book.ingest(batch, time.time(), sub.count_malformed)
                batch = []
                for st in book.sources.values():
                    diagnose(st)
                take_snapshot(book, {}, time.time())
        book.ingest(batch, time.time(), sub.count_malformed)
    finally:
        sub.close()
    assert sub.frames == total == 100_000
    # every frame is either used, or counted as malformed (envelope or body), or of an unknown kind
    used = book.events
    per_source_bad = sum(st.malformed for st in book.sources.values())
    assert sub.malformed > 10_000 and per_source_bad > 0
    assert used + sub.malformed + sub.unknown_kinds == total  # nothing vanished uncounted
    assert used > 5_000, "the structured valid events must still be counted"


@pytest.mark.parametrize(
    "body_patch, why",
    [
        ({"batch": 0, "n": 2**63 - 1}, "'n' is"),
        ({"batch": 2**40}, "'batch' is"),
        ({"dt": math.nan}, None),  # a NaN duration reads as 0, not an error
    ],
)
def test_one_hostile_step_costs_only_itself(body_patch: dict, why: str | None) -> None:
    sub = offline_subscriber()
    book = EvidenceBook()
    acc = np.array([1, 2], dtype=np.int32)
    good = step_body(step=1, rids=["a", "b"], draft=np.arange(1, 9, dtype=np.int32).reshape(2, 4),
                     accept_lens=acc + 1, tokens=np.arange(1, 6, dtype=np.int32))  # fmt: skip
    bad = dict(good, **body_patch)
    evs = [
        sub.decode_frame(encode(STEP, "h:1:r0", i, time.time(), b)) for i, b in enumerate([good, bad, good])
    ]
    book.ingest([e for e in evs if e is not None], time.time(), sub.count_malformed)
    st = book.sources["h:1:r0"]
    snap = take_snapshot(book, {}, time.time())  # the latest step is viewed for the screen
    assert snap.sources[0].proposals
    if why is None:
        assert st.steps == 3 and st.malformed == 0
    else:
        assert st.steps == 2 and st.malformed == 1
        assert why in (st.last_malformed or "")
    sub.close()


def test_hostile_envelopes_are_refused_with_a_reason() -> None:
    sub = offline_subscriber()
    hostile = [
        {"v": 1, "kind": "hello", "src": "s:1:r0", "seq": 0, "ts": math.nan},
        {"v": 1, "kind": "hello", "src": "s:1:r0", "seq": -5, "ts": 1.0},
        {"v": 1, "kind": "hello", "src": "s" * 10_000, "seq": 0, "ts": 1.0},
        {"v": 1, "kind": "x" * 1000, "src": "s:1:r0", "seq": 0, "ts": 1.0},
        {"v": "\x1b]0;t\x07" * 100, "kind": "hello"},
    ]
    for msg in hostile:
        assert sub.decode_frame(msgpack.packb(msg)) is None
        assert sub.last_malformed is not None
        assert "\x1b" not in sub.last_malformed and len(sub.last_malformed) < 300
    assert sub.malformed == len(hostile)
    sub.close()


def test_escape_sequences_never_reach_the_terminal() -> None:
    evil = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
    ev = decode(encode(HELLO, f"{evil}:1:r0", 0, 1.0, {"engine": {"name": evil}, "model": {"arch": evil}}))
    assert "\x1b" not in ev.src and "\u202e" not in ev.src
    book = EvidenceBook()
    book.ingest([ev], time.time())
    hello = book.sources[ev.src].hello
    assert hello is not None and hello.engine == printable(evil)
    assert hello.engine.startswith("\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e")
    assert hello.model.arch == printable(evil)


def test_a_flood_of_invented_sources_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each frame a new source: the tables stay capped, memory stays flat, and sources are forgotten
    an eighth of a table at a time, so the flood costs one sort per many new ids, not a scan per
    frame (counted, not timed: a timing would measure the box's load)."""
    from eagle3_top.tracer.analysis import evidence
    from eagle3_top.tracer.reader import eviction, ledger

    sorts: list[int] = []

    def counted(table: dict, evictions: eviction.Evictions) -> list:
        sorts.append(len(table))
        return eviction.make_room(table, evictions)

    monkeypatch.setattr(ledger, "make_room", counted)
    monkeypatch.setattr(evidence, "make_room", counted)
    sub = offline_subscriber()
    sub.max_sources = 256
    book = EvidenceBook(max_sources=64)
    body = {"engine": {"name": "x"}}
    frames = 40_960
    tracemalloc.start()
    for i in range(0, frames, 512):
        evs = [sub.decode_frame(encode(HELLO, f"fake{j}:1:r0", 0, 1.0, body)) for j in range(i, i + 512)]
        book.ingest([e for e in evs if e is not None], time.time())
        if i == 10_240:
            base, _ = tracemalloc.get_traced_memory()
    now, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(sub.sources) <= 256 and len(book.sources) <= 64
    assert sub.evicted_sources > frames - 300 and book.dropped_sources > frames - 100
    assert now < base + 4_000_000, f"memory grew from {base} to {now} bytes"
    # an eighth at a time: 32 of the ledger's 256 and 8 of the book's 64 per sort
    assert len(sorts) <= frames // 32 + frames // 8 + 2, len(sorts)
    snap = take_snapshot(book, {}, time.time())
    assert snap.evicted_sources == book.dropped_sources
    sub.close()


# -- honest counts ---------------------------------------------------------------------------------


def see(sub: Subscriber, src: str, seqs: list[int], kind: str = HELLO, body: dict | None = None) -> None:
    for s in seqs:
        sub.decode_frame(encode(kind, src, s, 1.0, body or {}))


def test_restart_under_the_same_id_is_a_restart_not_a_loss() -> None:
    sub = offline_subscriber()
    see(sub, "c:1:r0", list(range(100, 300_000)))  # a long-running publisher, joined late
    see(sub, "c:1:r0", list(range(0, 50)))  # restarted in its container: same host, same pid
    loss = sub.sources["c:1:r0"].loss()
    assert loss.restarts == 1 and loss.gaps == 0
    assert loss.late_join == 100 and loss.received == 300_000 - 100 + 50
    sub.close()


def test_restart_seen_through_the_publisher_start_time() -> None:
    sub = offline_subscriber()
    see(sub, "c:1:r0", [0, 1, 2], HEALTH, {"started": 1000.0})
    see(sub, "c:1:r0", [0, 1, 2], HEALTH, {"started": 2000.0})  # short-lived: seq barely moved
    loss = sub.sources["c:1:r0"].loss()
    assert loss.restarts == 1 and loss.gaps == 0
    sub.close()


def test_a_spoofed_seq_is_a_resync_not_billions_missed() -> None:
    sub = offline_subscriber()
    see(sub, "c:1:r0", [0, 1, 2, 2**63 - 1, 2**63 - 1])
    loss = sub.sources["c:1:r0"].loss()
    assert loss.resyncs == 1 and loss.gaps == 0
    see(sub, "c:1:r0", [5])  # then the honest publisher again: a restart-like fall back
    assert sub.sources["c:1:r0"].gaps < 10
    sub.close()


def test_gaps_are_split_into_tracer_drops_and_transit_losses() -> None:
    sub = offline_subscriber()
    see(sub, "c:1:r0", [0], HEALTH, {"dropped": 0, "started": 5.0})
    see(sub, "c:1:r0", list(range(1, 50)) + list(range(70, 100)))  # 20 holes
    see(sub, "c:1:r0", [100], HEALTH, {"dropped": 15, "started": 5.0})  # the tracer dropped 15 of them
    loss = sub.sources["c:1:r0"].loss()
    assert (loss.gaps, loss.publisher_dropped, loss.slow_consumer) == (20, 15, 5)
    assert "5 lost in transit" in loss.describe() and "15 dropped by the tracer" in loss.describe()
    sub.close()


def test_a_real_publisher_restart_on_the_same_port() -> None:
    """A real Publisher replaced by a new one on the same endpoint and source id (a container
    restart): the subscriber says 'restart', with no phantom loss."""
    src = SourceId("box", 1, 0, "test")
    pub = Publisher("tcp://127.0.0.1:0", src, hello_interval_s=0.2, health_interval_s=0.2)
    ep = pub.bound_endpoint
    sub = Subscriber([ep])
    try:
        wait_connected(sub)
        for _ in range(20):
            pub.publish(STEP, {"x": 1})
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline and sub.sources.get(src.key, None) is None:
            sub.poll(50)
        pub.close()
        for _ in range(50):  # the old socket lets go of the port within its linger
            try:
                pub = Publisher(ep, src, hello_interval_s=0.2, health_interval_s=0.2)
                break
            except zmq.ZMQError:
                time.sleep(0.1)
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            sub.poll(50)
            c = sub.sources.get(src.key)
            if c is not None and c.restarts:
                break
        loss = sub.sources[src.key].loss()
        assert loss.restarts == 1
        assert loss.slow_consumer <= 3  # at most what flew while the new one reconnected
    finally:
        pub.close()
        sub.close()


# -- the real app ------------------------------------------------------------------------------------


async def test_the_app_survives_a_fuzzed_stream_and_says_so() -> None:
    from eagle3_top.tui.app import Eagle3TopApp

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    app = Eagle3TopApp([ep], refresh_hz=10)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_until(
                pilot, lambda: app.latest is not None and app.latest.endpoints[0][1] == "connected"
            )
            await pilot.pause(0.3)
            sent = 0
            for f in frames(seed=3, count=20_000, sources=6):
                sock.send(f)
                sent += 1
                if sent % 2000 == 0:
                    await pilot.pause(0.05)
            evil = "\x1b]0;pwned\x07:1:r0"
            for seq in range(5):
                sock.send(encode(HELLO, evil, seq, time.time(), {"engine": {"name": "\x1b[2Jx"}}))
            await wait_until(pilot, lambda: app.latest is not None and app.latest.frames >= sent)
            await pilot.pause(0.5)
            assert app.feed.error is None and app.render_error is None
            assert app.latest is not None and app.latest.malformed > 1000
            text = screen_text(app)
            assert "malformed" in text
            for _ in range(len(app.latest.sources) + 1):  # every source's panels draw
                await pilot.press("tab")
                await pilot.pause(0.05)
            assert app.render_error is None
            assert "\x1b" not in screen_text(app)
    finally:
        sock.close(0)
