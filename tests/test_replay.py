"""Replay: a recording played on a virtual clock (pause, step, seek, speed), into the monitor's own
feed and screens, and judged by `check --replay`. Recordings are real MCAP files of real frames."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from itertools import groupby
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S, PATIENCE_S, screen_text, wait_until
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.reader.ledger import FrameLedger
from eagle3_top.tracer.reader.recording import read_recording
from eagle3_top.tracer.reader.replay import Timeline, parse_seek, parse_speed
from eagle3_top.tui.replay_app import ReplayApp
from eagle3_top.tui.replay_feed import CHECKPOINT_EVERY, ReplayFeed
from stream_samples import T0_NS, write_session

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    path = str(tmp_path_factory.mktemp("replay") / "session.mcap")
    return path, write_session(path)


class Wall:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def drain(tl: Timeline) -> list[int]:
    """Log times of every frame the timeline hands out now."""
    out: list[int] = []
    while batch := tl.take(64).frames:
        out += [f.log_time_ns for f in batch]
    return out


def figures(book: EvidenceBook) -> dict[str, tuple[object, ...]]:
    out = {}
    for key, st in book.sources.items():
        s = st.acceptance.summary(0.0)
        out[key] = (st.steps, st.acceptance.mean_accept_length, tuple(s.conditional), tuple(s.unconditional))
    return out


def book_of(path: str, upto_ns: int | None = None) -> EvidenceBook:
    """The reference: every frame up to ``upto_ns`` folded straight into a book at its receive time."""
    book, ledger = EvidenceBook(), FrameLedger()
    frames = [f for f in read_recording(path) if upto_ns is None or f.log_time_ns <= upto_ns]
    for t, grp in groupby(frames, key=lambda f: f.log_time_ns):
        book.ingest([e for e in map(ledger.decode_frame, (f.data for f in grp)) if e], t / 1e9)
    return book


# -- the clock ------------------------------------------------------------------------------------


def test_as_fast_as_possible_hands_out_every_frame_in_order(session: tuple[str, int]) -> None:
    path, n = session
    tl = Timeline(path, speed=None)
    times = drain(tl)
    assert len(times) == n and times == sorted(times)
    pos = tl.position()
    assert pos.at_end and pos.delivered == n and pos.fraction == 1.0
    assert tl.now() == times[-1] / 1e9


def test_speed_follows_the_wall_clock_and_pause_holds_it(session: tuple[str, int]) -> None:
    wall = Wall()
    tl = Timeline(session[0], speed=2.0, wall=wall)
    wall.t += 1.5  # 3 s of recording at 2x
    times = drain(tl)
    assert times and times[-1] <= T0_NS + 3 * 10**9 and times[-1] > T0_NS + int(2.8e9)
    assert tl.now() == pytest.approx((T0_NS + 3e9) / 1e9)
    assert not tl.toggle()  # paused
    wall.t += 10
    assert drain(tl) == [] and tl.now() == pytest.approx((T0_NS + 3e9) / 1e9)
    assert tl.toggle()  # playing again, from where it stood
    tl.set_speed(0.5)
    wall.t += 2  # 1 s of recording at 0.5x
    more = drain(tl)
    assert more[0] > times[-1] and more[-1] <= T0_NS + 4 * 10**9


def test_the_end_holds_still(session: tuple[str, int]) -> None:
    wall = Wall()
    tl = Timeline(session[0], speed=100.0, wall=wall)
    wall.t += 60  # far past the 20 s recording
    times = drain(tl)
    assert len(times) == session[1]
    assert tl.now() == times[-1] / 1e9 and tl.position().at_end
    assert not tl.toggle()  # pause at the end
    assert tl.toggle()  # play again: from the beginning, the book rebuilt
    again = tl.take(10_000)
    assert again.rewind and again.frames[0].log_time_ns == T0_NS and not tl.position().at_end


def test_a_followed_clock_waits_at_the_last_frame_read(session: tuple[str, int]) -> None:
    """Following a file nothing is appended to, the clock stops where the file does: it does not
    run on into time the recording does not hold (the scrubber read 80 s of a 20 s file)."""
    wall = Wall()
    tl = Timeline(session[0], speed=1.0, follow=True, wall=wall)
    wall.t += 60
    times = drain(tl)
    assert len(times) == session[1]
    wall.t += 60
    drain(tl)
    pos = tl.position()
    assert tl.now() == times[-1] / 1e9 and pos.elapsed_s == pos.length_s


def test_steps_and_seeks(session: tuple[str, int]) -> None:
    path, n = session
    tl = Timeline(path, speed=1.0, wall=Wall())
    tl.seek_time(5.0)
    batch = tl.take(10_000)
    assert not batch.rewind and batch.frames[-1].log_time_ns <= T0_NS + 5 * 10**9
    at5 = len(batch.frames)
    assert not tl.position().playing  # a seek pauses, to look at the moment
    tl.step_events(1)
    assert len(tl.take().frames) == 1
    tl.step_events(-1)  # back: start over and stop one frame earlier
    back = tl.take(10_000)
    assert back.rewind and len(back.frames) == at5
    tl.step_seconds(-2.0)
    two_back = tl.take(10_000)
    assert two_back.rewind and two_back.frames[-1].log_time_ns <= T0_NS + 3 * 10**9
    tl.seek_fraction(0.5)
    half = tl.take(10_000)
    assert not half.rewind  # forward from 3 s: only what lies between
    assert tl.position().fraction == pytest.approx(0.5, abs=0.01)
    tl.seek_fraction(0.0)
    assert tl.take().rewind and tl.position().delivered == 1  # the frame received at 0 s


def test_seek_and_speed_words() -> None:
    assert parse_seek("90") == ("time", 90.0)
    assert parse_seek("1:30") == ("time", 90.0)
    assert parse_seek("1:02:03") == ("time", 3723.0)
    assert parse_seek("45%") == ("fraction", 0.45)
    assert parse_speed("max") is None and parse_speed("2x") == 2.0 and parse_speed("0.25") == 0.25
    for bad in ("soon", "-5", "120%", "1:2:3:4"):
        with pytest.raises(ValueError, match="a time"):
            parse_seek(bad)
    with pytest.raises(ValueError, match="between 0.25 and 100"):
        parse_speed("500")


# -- the monitor's feed -----------------------------------------------------------------------------


def wait_at_end(feed: ReplayFeed, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while not (feed.position().at_end and feed.caught_up()):
        assert time.monotonic() < deadline, feed.position()
        time.sleep(0.02)


@pytest.mark.parametrize("speed", [None, 100.0])
def test_replayed_book_is_the_recorded_book(session: tuple[str, int], speed: float | None) -> None:
    path, _ = session
    feed = ReplayFeed(Timeline(path, speed=speed)).start()
    try:
        wait_at_end(feed)
        assert figures(feed.book) == figures(book_of(path))
        snap = feed.snapshot()
        assert snap.sources[0].steps == 200 and snap.now == (T0_NS + 19 * 10**9 + 10 * (10**9 // 11)) / 1e9
    finally:
        feed.stop()


@pytest.mark.parametrize("every", [CHECKPOINT_EVERY, 16, 2])
def test_a_seek_back_rebuilds_the_book_as_it_stood_then(session: tuple[str, int], every: int) -> None:
    """From the first frame (no checkpoint yet), from a checkpoint, and with checkpoints thinned
    out (every 2 frames makes more than the feed keeps): the same book as folding from the start."""
    path, _ = session
    tl = Timeline(path, speed=None)
    feed = ReplayFeed(tl, checkpoint_every=every, max_batch=8).start()
    try:
        wait_at_end(feed)
        full = figures(feed.book)
        for at in (6.0, 2.5, 15.0, 6.0):  # acceptance fell at 10 s: at 6 s it was still high
            tl.seek_time(at)
            deadline = time.monotonic() + PATIENCE_S
            while not feed.caught_up():
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert figures(feed.book) == figures(book_of(path, T0_NS + int(at * 1e9))), (every, at)
        (early,) = figures(feed.book).values()
        (late,) = full.values()
        assert early[1] > late[1]  # the accept length before the fall is higher: the screen shows then
        if every == 2:
            assert len(feed._saved) <= 64 < 220 // 2  # thinned, bounded
    finally:
        feed.stop()


def test_a_seek_to_a_checkpoint_let_go_meanwhile_goes_back_further(session: tuple[str, int]) -> None:
    """The feed thins its checkpoints while a seek that chose one of them is pending: the frames
    are handed out again from an earlier one, and the book is still right."""
    from eagle3_top.tracer.reader.ledger import FrameLedger as Ledger

    path, _ = session
    tl = Timeline(path, speed=None)
    feed = ReplayFeed(tl, checkpoint_every=16, poll_ms=0, max_batch=8)
    feed._sub = Ledger()
    while not tl.position().at_end:
        feed._pump(feed._sub)
    tl.seek_time(12.0)
    chosen = tl._pos
    assert chosen in feed._saved
    del feed._saved[chosen]  # as thinning would, after the seek chose it
    for _ in range(50):
        feed._pump(feed._sub)
    assert figures(feed.book) == figures(book_of(path, T0_NS + 12 * 10**9))


# -- the screen -------------------------------------------------------------------------------------


async def test_player_keys_move_the_scrubber(session: tuple[str, int]) -> None:
    path, _ = session
    app = ReplayApp(Timeline(path, speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 34)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        status = screen_text(app).splitlines()[0]
        assert "100%" in status and "19.9s / 19.9s" in status
        await pilot.press("5")
        await wait_until(pilot, lambda: " 50%" in screen_text(app).splitlines()[0], what="50%")
        assert "⏸" in screen_text(app).splitlines()[0]
        await pilot.press("j")
        await pilot.press(*"0:02", "enter")
        await wait_until(
            pilot, lambda: "2.0s / 19.9s" in screen_text(app).splitlines()[0], what="seek to 0:02"
        )
        delivered = app.timeline.position().delivered
        await pilot.press("comma")
        await wait_until(
            pilot, lambda: app.timeline.position().delivered == delivered - 1, what="one event back"
        )
        await pilot.press(".", ".")  # what a terminal sends for '.': full_stop
        await wait_until(
            pilot, lambda: app.timeline.position().delivered == delivered + 1, what="two forward"
        )
        await pilot.press("minus")  # from max down to 100x
        await wait_until(pilot, lambda: "100x" in screen_text(app).splitlines()[0], what="100x")
        await pilot.press("j", *"soon", "enter")  # a bad answer is one line, and nothing moves
        await pilot.pause(0.1)
        assert app.timeline.position().delivered == delivered + 1
        # home and end reach the player even though the sources table has the focus (it scrolls
        # on them otherwise)
        assert app.focused is app.table
        await pilot.press("end")
        await wait_until(pilot, lambda: " 100%" in screen_text(app).splitlines()[0], what="the end")
        await pilot.press("home")
        await wait_until(pilot, lambda: " 0.0s / 19.9s" in screen_text(app).splitlines()[0], what="start")


# -- the command line -------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_replay_refuses_bad_input_in_one_line(session: tuple[str, int], tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a recording\n")
    empty = tmp_path / "empty.mcap"
    from eagle3_top.tracer.reader.recording import RecordingWriter

    RecordingWriter(str(empty)).close()
    cases = {
        ("--replay", str(tmp_path / "missing.mcap")): "No such file",
        ("--replay", str(text)): "not an MCAP file",
        ("--replay", str(empty)): "holds no frames",
        ("--replay", session[0], "tcp://127.0.0.1:5557"): "give no endpoint",
        ("--replay", session[0], "--speed", "500"): "between 0.25 and 100",
        ("--speed", "2"): "go with --replay",
    }
    for args, why in cases.items():
        r = run(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert why in r.stderr.strip().splitlines()[-1] and "Traceback" not in r.stderr, (args, r.stderr)
    r = run("--replay", session[0])  # no terminal under pytest: refuses, and says what works
    assert r.returncode == 2 and "check --replay" in r.stderr


def test_check_replay_judges_the_recording(session: tuple[str, int]) -> None:
    r = run("check", "--replay", session[0], "--json", "--steps", "150")
    assert r.returncode == 0, r.stderr
    import json

    out = json.loads(r.stdout)
    assert out["verdict"] == "ok" and out["sources"][0]["steps"] == 150
    # ends before the evidence is in: partial, and the recording's end is named
    r = run("check", "--replay", session[0], "--steps", "1000", "--timeout", "100")
    assert r.returncode == 3 and "the recording ends 19.9s after its first frame" in r.stderr


def test_check_replay_on_a_damaged_recording_is_partial(session: tuple[str, int], tmp_path: Path) -> None:
    data = bytearray(Path(session[0]).read_bytes())
    # flip bytes inside the compressed data of a chunk in the middle
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])
    bad = tmp_path / "flipped.mcap"
    bad.write_bytes(bytes(data))
    r = run("check", "--replay", str(bad), "--steps", "150", "--min-steps", "100")
    assert r.returncode == 3, r.stdout + r.stderr
    assert (
        "evidence lost: bad chunk at byte" in r.stdout and "part of the recording was unreadable" in r.stdout
    )
    r = run("check", "--replay", str(bad), "--steps", "150", "--min-steps", "100", "--allow-partial")
    assert r.returncode == 0


def test_check_replay_refuses_a_file_that_is_no_recording(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(os.urandom(4096))
    r = run("check", "--replay", str(junk))
    assert r.returncode == 2 and "not an MCAP file" in r.stderr and "Traceback" not in r.stderr
    r = run("check")
    assert r.returncode == 2 and "--replay FILE" in r.stderr


# -- live, then replayed ----------------------------------------------------------------------------


def free_endpoint() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def shown(snap: object) -> dict[str, tuple[object, ...]]:
    """What the acceptance panels and the findings panel show, per source."""
    out = {}
    for s in snap.sources:  # type: ignore[attr-defined]
        sm = s.summary
        out[s.key] = (
            s.steps, s.auxes, sm.mean_accept_length, tuple(sm.conditional), tuple(sm.unconditional),
            tuple(sm.histogram), tuple(f.code for f in s.findings),
        )  # fmt: skip
    return out


def test_replay_shows_what_the_live_monitor_showed(tmp_path: Path) -> None:
    """The built-in engine, mis-wired, watched live by the monitor's own feed with its recording
    on (the `r` key), then the recording replayed at 100x and as fast as possible: the same figures
    and the same findings at the end; and `check --replay` gives the live `check`'s verdict."""
    pytest.importorskip("torch")
    from eagle3_top.hooks.toy import paths
    from eagle3_top.tui.feed import Feed

    ep = free_endpoint()
    path = str(tmp_path / "live.mcap")
    feed = Feed([ep])
    assert feed.recording.start(path) is None
    feed.start()
    check = subprocess.Popen(
        [*CLI, "check", ep, "--json", "--timeout", "60", "--steps", "100"], stdout=subprocess.PIPE, text=True
    )
    engine = subprocess.Popen(
        [*CLI, "toy", "--publish", ep, "--max-steps-per-s", "100",
         "--speculative-draft-model-path", paths.draft_ids_not_read_dir()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        live_check, _ = check.communicate(timeout=HANG_GUARD_S)
        deadline = time.monotonic() + PATIENCE_S
        while not feed.snapshot().sources or feed.snapshot().sources[0].steps < 300:
            assert time.monotonic() < deadline, "the engine did not step"
            time.sleep(0.1)
    finally:
        engine.terminate()
        engine.wait(timeout=HANG_GUARD_S)
    time.sleep(1.0)  # its last frames, the goodbye among them
    feed.stop()
    frames = list(read_recording(path))
    last = max(f.log_time_ns for f in frames) / 1e9
    live = shown(feed.snapshot(now=last))
    (key,) = live
    assert live[key][-1] and live[key][2] < 1.5  # the findings are there, and the accept length is low
    for speed in (100.0, None):
        replay = ReplayFeed(Timeline(path, speed=speed)).start()
        try:
            wait_at_end(replay)
            assert shown(replay.snapshot()) == live, speed
        finally:
            replay.stop()
    import json

    r = run("check", "--replay", path, "--json", "--steps", "100")
    replayed, lived = json.loads(r.stdout), json.loads(live_check)
    assert r.returncode == check.returncode == 1
    assert [f["code"] for f in replayed["findings"]] == [f["code"] for f in lived["findings"]]


async def test_r_records_what_the_monitor_receives(publisher, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from eagle3_top.tracer.schema import STEP, decode
    from eagle3_top.tui.app import Eagle3TopApp
    from stream_samples import hello, step

    app = Eagle3TopApp([publisher.bound_endpoint], record_dir=str(tmp_path), refresh_hz=20)
    async with app.run_test(size=(120, 34)) as pilot:
        publisher.set_hello(hello())
        await wait_until(pilot, lambda: app.feed.snapshot().sources, what="the hello")
        await pilot.press("r")
        await wait_until(
            pilot, lambda: "● REC" in screen_text(app).splitlines()[0], what="REC in the status bar"
        )
        # the toast comes once the file is open, not when r is pressed
        await wait_until(
            pilot, lambda: any("recording to" in n.message for n in app._notifications), what="the toast"
        )
        for i in range(50):
            publisher.publish(STEP, step(i))
        await wait_until(pilot, lambda: app.feed.recording.frames >= 50, what="50 frames recorded")
        await pilot.press("r")
        await wait_until(pilot, lambda: app.feed.recording.last_closed, what="the file closed")
        await wait_until(
            pilot,
            lambda: "● REC" not in screen_text(app).splitlines()[0],
            what="REC gone from the status bar",
        )
        # r again into a directory that cannot take a file: one line in the status bar, and on
        (path,) = tmp_path.glob("eagle3-top-*.mcap")
        app.record_dir = str(path)  # a file, not a directory
        await pilot.press("r")
        await wait_until(
            pilot, lambda: "cannot record to" in screen_text(app).splitlines()[0], what="the error"
        )
        publisher.publish(STEP, step(50))
        await wait_until(pilot, lambda: app.feed.snapshot().sources[0].steps == 51, what="still receiving")
    reader = read_recording(str(path))
    steps = [decode(f.data).body["step"] for f in reader if decode(f.data).kind == STEP]
    assert steps == list(range(50))  # every step, once, in order
    assert reader.report.complete  # closed whole: the summary is there


# -- follow, and the shipped sample ---------------------------------------------------------------


def test_follow_keeps_up_with_a_file_being_written(tmp_path: Path) -> None:
    """A recorder writing while the replay follows: every frame it closes into a chunk reaches the
    replay's book, in order, and the replay waits at the end instead of stopping."""
    import threading

    from eagle3_top.tracer.reader.recording import RecordingWriter
    from eagle3_top.tracer.schema import HELLO, STEP, encode
    from stream_samples import hello, step

    path = str(tmp_path / "growing.mcap")
    writer = RecordingWriter(path, flush_interval_s=0.0)
    writer.add(encode(HELLO, "box:1:r0", 0, T0_NS / 1e9, hello().to_body()), "tcp://box:1", T0_NS)
    writer.tick()
    feed = ReplayFeed(Timeline(path, speed=None, follow=True)).start()
    done = threading.Event()

    def write() -> None:
        for i in range(1, 301):
            t = T0_NS + i * 10**7
            writer.add(encode(STEP, "box:1:r0", i, t / 1e9, step(i)), "tcp://box:1", t)
            if i % 20 == 0:
                writer.tick()
                time.sleep(0.05)
        writer.close()
        done.set()

    try:
        threading.Thread(target=write, daemon=True).start()
        deadline = time.monotonic() + PATIENCE_S
        while not (snap := feed.snapshot()).sources or snap.sources[0].steps < 300:
            assert time.monotonic() < deadline, feed.position()
            time.sleep(0.05)
        assert done.wait(PATIENCE_S)
        pos = feed.position()
        assert pos.follow and pos.total == pos.delivered == 301
        assert figures(feed.book) == figures(book_of(path))
    finally:
        feed.stop()


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_shipped_sample_shows_the_motivating_bug() -> None:
    """`make replay`'s recording: two built-in engines, one mis-wired. `check --replay` fails it on
    that source only, and the replay's findings are the same."""
    import json

    sample, manifest = str(EXAMPLES / "demo.mcap"), str(EXAMPLES / "demo-manifest.json")
    r = run("check", "--replay", sample, "--manifest", manifest, "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    bad = {f["source"] for f in out["findings"] if f["severity"] == "error"}
    assert len(out["sources"]) == 2 and len(bad) == 1
    assert "LAYER_IDS_NOT_READ" in {f["code"] for f in out["findings"]}
    from eagle3_top.tracer.analysis.manifest import load_manifest

    feed = ReplayFeed(Timeline(sample, speed=None), manifest=load_manifest(manifest)).start()
    try:
        wait_at_end(feed)
        flagged = {s.key: {f.code for f in s.findings} for s in feed.snapshot().sources}
        assert "LAYER_IDS_NOT_READ" in flagged[next(iter(bad))]
        (good,) = set(flagged) - bad
        assert not {"LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH"} & flagged[good]
    finally:
        feed.stop()


async def test_a_damaged_recording_replays_what_was_read_and_says_what_was_lost(
    session: tuple[str, int], tmp_path: Path
) -> None:
    path, n = session
    data = bytearray(Path(path).read_bytes())
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])
    bad = tmp_path / "flipped.mcap"
    bad.write_bytes(bytes(data))
    tl = Timeline(str(bad), speed=None)
    lost = tl.damage()
    assert lost and lost[0].startswith("bad chunk at byte") and "it held the frames received" in lost[0]
    assert 0 < len(tl.frames) < n  # every other chunk still replays
    app = ReplayApp(tl, refresh_hz=20)
    async with app.run_test(size=(160, 34)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        status = screen_text(app).splitlines()[0]
        assert f"⚠ {len(lost)} problem" in status
        assert any("part of the file was not read" in str(note.title) for note in app._notifications)


async def test_w_switches_acceptance_to_the_last_seconds(session: tuple[str, int]) -> None:
    """The session's acceptance fell halfway: since start the table shows the average, over the
    last 10 s only the fallen figure, as the book counts it."""
    path, _ = session
    end = max(f.log_time_ns for f in read_recording(path)) / 1e9
    (st,) = book_of(path).sources.values()
    whole, last10 = st.acceptance.summary(end), st.acceptance.summary(end, 10)
    assert last10.mean_accept_length < whole.mean_accept_length - 0.3
    app = ReplayApp(Timeline(path, speed=None), refresh_hz=20)
    async with app.run_test(size=(140, 34)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")

        def row() -> str:
            return screen_text(app).splitlines()[2]

        await wait_until(pilot, lambda: f" {whole.mean_accept_length:.2f} " in row(), what="since start")
        await pilot.press("w", "w")  # 60 s (the whole session), then 10 s
        await wait_until(pilot, lambda: f" {last10.mean_accept_length:.2f} " in row(), what="last 10 s")
        text = screen_text(app)
        assert "last 10 s" in text.splitlines()[0] and "last 10 s" in text
        await pilot.press("w")
        await wait_until(pilot, lambda: "last 10 s" not in screen_text(app).splitlines()[0], what="back")


async def test_training_acc_i_stands_beside_the_served_rates() -> None:
    from eagle3_top.tracer.analysis.manifest import load_manifest

    manifest = load_manifest(str(EXAMPLES / "demo-manifest.json"))
    timeline = Timeline(str(EXAMPLES / "demo.mcap"), speed=None)
    app = ReplayApp(timeline, manifest=manifest, refresh_hz=20, baseline_tok_s=300)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        want = f"◂{manifest.training_acc[0]:.2f}"
        await wait_until(pilot, lambda: want in screen_text(app), what="acc_i beside cond")
        assert "◂ acc_i" in screen_text(app)
        # and against the baseline given: the healthy engine (selected first) beats 300 tok/s
        await wait_until(pilot, lambda: "vs no speculation x1." in screen_text(app), what="the payoff")
        assert "break-even accept len" in screen_text(app)
