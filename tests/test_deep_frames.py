"""Frames nested deeper than any of ours (valid msgpack: an unknown key the protocol says to ignore,
600 lists deep) are refused whole where they arrive, counted against their source and named; the
replay's checkpoints copy only the book's own state. Real msgpack bytes, a real recording."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import HANG_GUARD_S, screen_text, wait_until
from eagle3_top.tracer.reader.ledger import FrameLedger
from eagle3_top.tracer.reader.recording import RecordingWriter
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tracer.schema import HELLO, STEP, encode
from eagle3_top.tui.replay_app import ReplayApp
from eagle3_top.tui.replay_feed import CHECKPOINT_EVERY
from stream_samples import T0_NS, hello, step

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
SRC = "box:7:r0"
FRAMES = 3000
# Deep frames around the first checkpoint (the latest step, the recent ones, the hello: what a
# checkpoint holds), and one later; seconds 0 - 30 of the recording, 100 frames a second.
DEEP = frozenset(range(CHECKPOINT_EVERY - 8, CHECKPOINT_EVERY + 4)) | {2501}
DEEP_HELLO = 2000


def nested(depth: int) -> list[object]:
    out: list[object] = []
    for _ in range(depth - 1):
        out = [out]
    return out


def frame(i: int) -> bytes:
    """Frame ``i`` of the session: a hello every 100, steps otherwise; the deep ones carry an
    unknown key 600 lists deep."""
    body = hello().to_body() if i % 100 == 0 else step(i)
    if i in DEEP or i == DEEP_HELLO:
        body["x_future"] = nested(600)
    return encode(HELLO if i % 100 == 0 else STEP, SRC, i, (T0_NS + i * 10**7) / 1e9, body)


def write_deep_session(path: str) -> None:
    w = RecordingWriter(path, flush_interval_s=0.0)
    for i in range(FRAMES):
        w.add(frame(i), "tcp://box:5557", T0_NS + i * 10**7)
        if i % 50 == 49:
            w.tick()
    w.close()


N_DEEP = len(DEEP) + 1


def test_a_frame_nested_600_deep_is_refused_counted_against_its_source_and_named() -> None:
    ledger = FrameLedger()
    events = [ledger.decode_frame(frame(i)) for i in range(1990, 2010)]
    assert events.count(None) == 1 and events[10] is None  # frame 2000, the deep hello
    assert ledger.malformed == 1 and ledger.undecodable == 0
    assert ledger.last_malformed == f"{SRC}: hello seq 2000: nested deeper than 32 levels"
    assert ledger.sources[SRC].missed == 0  # it arrived: no hole in the source's sequence
    # as deep as a frame may be: taken
    ok = encode(STEP, SRC, 2010, 1.0, {**step(1), "x_future": nested(32)})
    assert ledger.decode_frame(ok) is not None and ledger.malformed == 1


def test_replay_once_survives_600_deep_frames_and_counts_them(tmp_path: Path) -> None:
    rec = str(tmp_path / "deep.mcap")
    write_deep_session(rec)
    text = subprocess.run(
        [*CLI, "--replay", rec, "--once"], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert text.returncode == 0, text.stderr[-2000:]
    assert SRC in text.stdout and "RecursionError" not in text.stderr
    out = subprocess.run(
        [*CLI, "--replay", rec, "--once", "--json"], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert out.returncode == 0, out.stderr[-2000:]
    snap = json.loads(out.stdout)
    assert snap["transport"]["malformed"] == N_DEEP
    assert "nested deeper than 32 levels" in snap["transport"]["last_malformed"]
    (src,) = snap["sources"]
    hellos = FRAMES // 100
    assert src["events"]["steps"] == FRAMES - hellos - len(DEEP)  # every other step counted


async def test_interactive_replay_survives_600_deep_frames_and_seeks_across_them(tmp_path: Path) -> None:
    rec = str(tmp_path / "deep.mcap")
    write_deep_session(rec)
    app = ReplayApp(Timeline(rec, speed=None), refresh_hz=20)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        await wait_until(
            pilot, lambda: f"malformed {N_DEEP}" in screen_text(app), what="the deep frames counted"
        )
        await pilot.press("5")  # back before them: from the start, the count as it stood then
        await wait_until(pilot, lambda: " 50%" in screen_text(app).splitlines()[0], what="50%")
        await wait_until(pilot, lambda: "malformed 0" in screen_text(app), what="none counted yet")
        await pilot.press("9")  # past them: from the checkpoint made among them
        await wait_until(pilot, lambda: " 90%" in screen_text(app).splitlines()[0], what="90%")
        await wait_until(pilot, lambda: f"malformed {N_DEEP}" in screen_text(app), what="counted again")


def test_a_checkpoint_shares_what_the_wire_sent_instead_of_copying_it() -> None:
    """What the replay keeps every 2,048 frames is a copy of the book's own state: the events,
    hellos and parked rid lists decoded from frames are the same objects in the copy, so a frame's
    contents (here an unknown key of 20,000 strings in every step) cost a checkpoint nothing."""
    import copy

    from eagle3_top.tracer.analysis.evidence import EvidenceBook

    ledger, book = FrameLedger(), EvidenceBook()
    big = [f"x{i}" for i in range(20_000)]
    frames = [encode(HELLO, SRC, 0, 1.0, hello().to_body())]
    frames += [encode(STEP, SRC, i, 1.0 + i, {**step(i), "x_future": big}) for i in range(1, 40)]
    book.ingest([ev for ev in map(ledger.decode_frame, frames) if ev is not None], 2.0)
    st = book.sources[SRC]
    assert st.steps == 39 and st.requests._backlog  # parked until the next fold
    saved, saved_ledger = copy.deepcopy((book, ledger))
    kept = saved.sources[SRC]
    assert kept is not st and kept.acceptance is not st.acceptance  # the book's own state: copied
    assert kept.last_step_event is st.last_step_event  # the decoded event: shared
    assert kept.hello is st.hello
    assert kept.requests._backlog[0][1][0] is st.requests._backlog[0][1][0]  # a parked rid list
    # the copy goes on by itself: what is folded into one does not show in the other
    kept.requests.fold()
    assert len(kept.requests.table().rids) == 4 and not st.requests.table().rids
