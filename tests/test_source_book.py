"""The source book under a hostile stream: sequence numbers that jump (issue 28, item 4), figures
outside their possible range, and a flood of invented source ids (item 5). Real msgpack frames over
a real loopback socket or in a real recording; the numbers asserted are those a user reads in
`record`'s report, `recording info --json`, `--once --json` and `check --json`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from conftest import HANG_GUARD_S, poll_until
from eagle3_top.tracer.reader.recording import RecordingWriter, read_recording
from eagle3_top.tracer.schema import HELLO, STEP, decode, encode, step_body
from stream_samples import hello, step

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
EP = "tcp://127.0.0.1:5557"
T0_NS = 1_780_000_000 * 10**9
SRC = "gpu-a:7:r0"
# What a fuzzer sent: the first two honest, then a spoofed seq, then two that fall back from it to
# where no publisher has counted either.
JUMPS = [0, 1, 2**63 - 1, 2**53, 2**53 + 1]


def run(*args: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def jumping_frames(t0: float = 1_780_000_000.0) -> list[bytes]:
    frames = [encode(HELLO, SRC, JUMPS[0], t0, hello().to_body())]
    frames += [encode(STEP, SRC, s, t0 + i, step(i)) for i, s in enumerate(JUMPS[1:], 1)]
    return frames


def test_a_seq_that_jumps_is_counted_as_resyncs_not_as_loss_everywhere(
    xpub: tuple[zmq.Socket, str], tmp_path: Path
) -> None:
    sock, ep = xpub
    path = str(tmp_path / "jumps.mcap")
    proc = subprocess.Popen([*CLI, "record", ep, "-o", path], stderr=subprocess.PIPE, text=True)
    try:
        assert sock.poll(60_000), "the recorder never subscribed"
        assert sock.recv()[:1] == b"\x01"
        for frame in jumping_frames():
            sock.send(frame)
        marker = encode(HELLO, "marker:1:r0", 0, 1_780_000_010.0, {})
        sock.send(marker)

        def recorded() -> bool:
            try:
                return any(f.data == marker for f in read_recording(path))
            except Exception:  # not a whole file yet
                return False

        poll_until(recorded, "the recorder to write the frames sent")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, err
    # record's own report at stop
    assert "0 missed" in err and "9007199254740992" not in err
    assert f"{SRC} via {ep}: 2 implausible seq jump(s)" in err

    info = run("recording", "info", path, "--json")
    assert info.returncode == 0, info.stderr
    drops = json.loads(info.stdout)["sources"][SRC]["drops"][ep]
    assert (drops["gaps"], drops["slow_consumer"], drops["resyncs"], drops["restarts"]) == (0, 0, 2, 0)
    assert drops["received"] == len(JUMPS)

    once = run("--replay", path, "--once", "--json")
    assert once.returncode == 0, once.stderr
    (src,) = [s for s in json.loads(once.stdout)["sources"] if s["key"] == SRC]
    assert (src["loss"]["gaps"], src["loss"]["resyncs"], src["loss"]["late_join"]) == (0, 2, 0)
    assert src["loss"]["describe"] == "2 implausible seq jump(s)"


@pytest.mark.parametrize(
    "seqs, resyncs, restarts, gaps",
    [
        ([2**62, 2**62 + 1], 1, 0, 0),  # a first seq past any count: no late join of 2^62 events
        ([0, 1, 2**40, 5], 1, 1, 5),  # a restart after the resync: the new publisher's 0..4 missed
    ],
)
def test_no_epoch_starts_past_the_resync_rule(
    tmp_path: Path, seqs: list[int], resyncs: int, restarts: int, gaps: int
) -> None:
    path = str(tmp_path / "r.mcap")
    w = RecordingWriter(path)
    for i, s in enumerate(seqs):
        w.add(encode(STEP, SRC, s, 1_780_000_000.0 + i, step(i)), EP, T0_NS + i * 10**9)
    w.close()
    info = run("recording", "info", path, "--json")
    assert info.returncode == 0, info.stderr
    drops = json.loads(info.stdout)["sources"][SRC]["drops"][EP]
    assert (drops["resyncs"], drops["restarts"], drops["gaps"], drops["late_join"]) == (
        resyncs,
        restarts,
        gaps,
        0,
    )


# -- figures outside their possible range ---------------------------------------------------------

STAR = np.array([-1] + [0] * 7, dtype=np.int32)  # 8 nodes, every draft a child of the root: depth 1


def impossible_step(i: int, batch: int = 4) -> dict[str, object]:
    """A tree of depth 1 whose requests claim 5 accepted drafts: an accept rate of 500% and an
    accept length of 6 where 2 is the most a step can make. Its columns add up: only the figure
    is impossible."""
    acc = np.full(batch, 5, dtype=np.int32)
    return step_body(
        step=i, rids=[f"bad{r}" for r in range(batch)], topk=2,
        draft=np.arange(1, batch * 8 + 1, dtype=np.int32).reshape(batch, 8),
        parents=np.tile(STAR, (batch, 1)), accept_lens=acc + 1,
        tokens=np.arange(1, int(acc.sum()) + batch + 1, dtype=np.int32),
    )  # fmt: skip


def test_an_impossible_step_is_a_bad_frame_counted_not_a_figure_shown() -> None:
    """Over a real publisher: honest chain steps (at most 3 drafts of 3 accepted) interleaved with
    impossible tree steps. `check --json` folds only the honest ones and counts the others."""
    import threading

    from eagle3_top.tracer.schema import SourceId
    from eagle3_top.tracer.serving.publisher import Publisher

    pub = Publisher("tcp://127.0.0.1:0", SourceId("gpu-b", 9, 0, "test"), hello_interval_s=0.5)
    pub.set_hello(hello())
    stop = threading.Event()

    def steps() -> None:
        i = 0
        while not stop.is_set():
            pub.publish(STEP, impossible_step(i) if i % 3 == 0 else step(i, max_accept=4))
            i += 1
            time.sleep(0.005)

    t = threading.Thread(target=steps, daemon=True)
    t.start()
    try:
        r = run("check", pub.bound_endpoint, "--json", "--steps", "60", "--timeout", "120", "--allow-partial")
    finally:
        stop.set()
        t.join()
        pub.close()
    out = json.loads(r.stdout)
    (src,) = out["sources"]
    assert src["malformed"] > 0 and "more than the 1 drafts its tree proposed" in src["last_malformed"]
    assert 1.0 <= src["accept_length"] <= 4.0  # the chain's most: 3 drafts and the bonus token
    assert src["unconditional"] and all(0.0 <= p <= 1.0 for p in src["unconditional"])
    assert len(src["unconditional"]) == 3  # the impossible tree's positions were never counted


def test_a_recording_of_impossible_steps_shows_no_impossible_rate(tmp_path: Path) -> None:
    path = str(tmp_path / "impossible.mcap")
    w = RecordingWriter(path)
    frames = [encode(HELLO, SRC, 0, 1_780_000_000.0, hello().to_body())]
    frames += [
        encode(STEP, SRC, i, 1_780_000_000.0 + i / 10, impossible_step(i) if i % 2 else step(i, max_accept=4))
        for i in range(1, 41)
    ]
    for i, f in enumerate(frames):
        w.add(f, EP, T0_NS + i * 10**8)
    w.close()
    once = run("--replay", path, "--once", "--json")
    assert once.returncode == 0, once.stderr
    (src,) = json.loads(once.stdout)["sources"]
    assert src["events"]["malformed"] == src["events"]["step_errors"] == 20
    assert src["events"]["steps"] == 20
    acc = src["acceptance"]
    assert acc["accept_rate"] is not None and 0.0 <= acc["accept_rate"] <= 1.0
    assert 1.0 <= acc["accept_length"] <= 4.0
    assert all(0.0 <= p <= 1.0 for p in acc["unconditional"])
    # and the frames themselves are all still in the recording, as received
    assert [decode(f.data).seq for f in read_recording(path)] == list(range(41))


# -- a flood of invented source ids ---------------------------------------------------------------

ENGINE = "gpu-real:42:r0"


def flooded_recording(path: str, steps: int = 60, flood_per_step: int = 1100) -> None:
    """A real engine (a hello every 40 steps, then steps) whose every step is followed by
    ``flood_per_step`` frames of sources invented for one frame each: a step body with its
    columns wrong, or a hello that is no map. The 256-source book overflows between any two of the
    engine's frames."""
    w = RecordingWriter(path)
    t, seq, fake = 0, 0, 0
    bad_step = {**step(0), "accepted": b"\x00"}  # a column of the wrong length

    def add(src: str, s: int, kind: str, body: dict[str, object]) -> None:
        nonlocal t
        w.add(encode(kind, src, s, 1_780_000_000.0 + t / 1e4, body), EP, T0_NS + t * 10**5)
        t += 1

    for i in range(steps):
        if i % 20 == 0:
            add(ENGINE, seq, HELLO, hello().to_body())
            seq += 1
        add(ENGINE, seq, STEP, step(i, max_accept=4))
        seq += 1
        for _ in range(flood_per_step):
            add(f"fake{fake}:1:r0", 0, STEP if fake % 2 else HELLO, bad_step if fake % 2 else {"engine": 5})
            fake += 1
    w.close()


def test_a_flood_of_invented_sources_does_not_evict_a_real_engine_from_check(tmp_path: Path) -> None:
    path = str(tmp_path / "flood.mcap")
    flooded_recording(path)
    r = run("check", "--replay", path, "--json", "--steps", "50", "--allow-partial")
    out = json.loads(r.stdout)
    (engine,) = [s for s in out["sources"] if s["key"] == ENGINE]
    assert engine["hello"] is True and engine["steps"] == 60  # none forgotten, none restarted
    assert engine["missing"] == []
    assert out["evictions"]["proven"] == 0 and out["evictions"]["unproven"] > 60_000
    assert any("never sent a hello and steps" in n for n in out["notes"])

    once = run("--replay", path, "--once", "--json")
    assert once.returncode == 0, once.stderr
    snap = json.loads(once.stdout)
    (src,) = [s for s in snap["sources"] if s["key"] == ENGINE]
    assert src["events"]["steps"] == 60 and src["hello"] is not None
    loss = src["loss"]
    assert (loss["gaps"], loss["late_join"], loss["received"]) == (0, 0, 63)  # the seq counters kept it too
    assert snap["transport"]["evictions"]["proven"] == 0 and snap["transport"]["evictions"]["unproven"] > 0

    # the recorder's writer took all 66,000 sources (MCAP numbers only 65,535 channels); recording
    # info names each by its frames
    info = run("recording", "info", path, "--json")
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert len(got["sources"]) == 60 * 1100 + 1 and "many-sources" not in got["sources"]
    assert got["sources"][ENGINE]["frames"] == 63 and got["sources"]["fake65999:1:r0"]["frames"] == 1
    assert got["sources"][ENGINE]["drops"][EP]["gaps"] == 0


def test_live_check_keeps_a_real_engine_through_a_flood_over_loopback(xpub: tuple[zmq.Socket, str]) -> None:
    """An engine on one endpoint sends a hello and 15 steps; then 2,000 invented ids of one frame
    each arrive on another; then the engine's 25 other steps. check judges the engine on all 40
    steps it sent, with its hello, and names the flood by kind."""
    import threading

    engine_sock, engine_ep = xpub
    flood = zmq.Context.instance().socket(zmq.XPUB)
    flood.setsockopt(zmq.LINGER, 0)
    flood.setsockopt(zmq.SNDHWM, 0)  # every invented id queued, however slow the reader
    flood.bind("tcp://127.0.0.1:0")
    flood_ep = flood.getsockopt_string(zmq.LAST_ENDPOINT)

    def send() -> None:
        if not (engine_sock.poll(60_000) and flood.poll(60_000)):  # check subscribed to both
            return
        engine_sock.recv(), flood.recv()
        engine_sock.send(encode(HELLO, ENGINE, 0, 1_780_000_000.0, hello().to_body()))
        for i in range(1, 41):
            engine_sock.send(encode(STEP, ENGINE, i, 1_780_000_000.0 + i, step(i, max_accept=4)))
            if i == 15:
                for k in range(2000):
                    flood.send(encode(STEP, f"fake{k}:1:r0", 0, 1_780_000_000.0, {"batch": "x"}))

    t = threading.Thread(target=send, daemon=True)
    t.start()
    try:
        r = run("check", engine_ep, flood_ep, "--json", "--steps", "30", "--timeout", "90", "--allow-partial")
    finally:
        t.join()
        flood.close()
    out = json.loads(r.stdout)
    (engine,) = [s for s in out["sources"] if s["key"] == ENGINE]
    assert engine["hello"] is True and engine["steps"] == 40 and engine["missing"] == []
    assert out["evictions"]["proven"] == 0 and out["evictions"]["unproven"] > 0
    assert any("never sent a hello and steps" in n for n in out["notes"])


async def test_the_monitor_keeps_the_engine_and_says_what_it_forgot(tmp_path: Path) -> None:
    """The monitor replaying a flood: the engine's row stays, and the status bar names what was
    forgotten by kind."""
    from conftest import screen_text, wait_until
    from eagle3_top.tracer.reader.replay import Timeline
    from eagle3_top.tui.replay_app import ReplayApp

    path = str(tmp_path / "flood.mcap")
    flooded_recording(path, steps=20, flood_per_step=400)
    app = ReplayApp(Timeline(path, speed=None), refresh_hz=20)
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        await wait_until(
            pilot, lambda: "never sent a hello and steps" in screen_text(app), what="the evictions by kind"
        )
        text = screen_text(app)
        assert "gpu-real" in text and "had: their figures start over" not in text
        snap = app.feed.snapshot()
        (engine,) = [s for s in snap.sources if s.key == ENGINE]
        assert engine.hello is not None and engine.steps == 20
        assert snap.evictions.proven == 0 and snap.evictions.unproven > 0


def random_step(rng: np.random.Generator, i: int) -> dict[str, object]:
    """Columns that add up, figures anywhere: a random width, random tree links (some no tree at
    all), accepted counts anywhere in [0, n - 1]."""
    n, batch = int(rng.integers(1, 12)), int(rng.integers(1, 5))
    parents = None
    if rng.random() < 0.7:
        parents = np.stack([[-1, *(int(rng.integers(-1, j)) for j in range(1, n))] for _ in range(batch)])
    acc = rng.integers(0, n, batch).astype(np.int32)
    return step_body(
        step=i, rids=[f"r{k}" for k in range(batch)], topk=2,
        draft=rng.integers(1, 100, (batch, n)).astype(np.int32), accept_lens=acc + 1,
        parents=None if parents is None else parents.astype(np.int32),
        tokens=rng.integers(1, 100, int(acc.sum()) + batch).astype(np.int32),
    )  # fmt: skip


def test_fuzzed_steps_never_show_a_figure_outside_its_range(tmp_path: Path) -> None:
    path = str(tmp_path / "fuzz.mcap")
    rng = np.random.default_rng(28)
    w = RecordingWriter(path)
    for i in range(3000):
        src = f"fuzz{i % 5}:1:r0"
        w.add(
            encode(STEP, src, i // 5, 1_780_000_000.0 + i / 100, random_step(rng, i)), EP, T0_NS + i * 10**7
        )
    w.close()
    once = run("--replay", path, "--once", "--json")
    assert once.returncode == 0, once.stderr
    sources = json.loads(once.stdout)["sources"]
    assert len(sources) == 5
    for src in sources:
        assert src["events"]["steps"] > 0 and src["events"]["step_errors"] > 0  # both kinds were sent
        acc = src["acceptance"]
        deepest = len(acc["unconditional"])  # the deepest position any folded step proposed
        assert 0.0 <= acc["accept_rate"] <= 1.0
        assert 1.0 <= acc["accept_length"] <= deepest + 1
        assert all(0.0 <= p <= 1.0 for p in acc["unconditional"] + acc["conditional"])
        for r in src["recent"].values():
            assert r["accept_rate"] is None or 0.0 <= r["accept_rate"] <= 1.0


def test_a_health_counter_claiming_more_drops_than_holes_is_not_shown(tmp_path: Path) -> None:
    """The tracer's drops took seq numbers, so they are among the holes: a health event claiming
    2^62 drops where 3 seq numbers are missing shows 3 at most."""
    from eagle3_top.tracer.schema import HEALTH, Health

    path = str(tmp_path / "h.mcap")
    w = RecordingWriter(path)
    frames = [encode(HEALTH, SRC, 0, 1_780_000_000.0, Health(sent=0, dropped=0, started=5.0).to_body())]
    frames += [encode(STEP, SRC, s, 1_780_000_000.0 + s, step(s)) for s in (1, 2, 6)]  # 3, 4, 5 missing
    frames.append(
        encode(HEALTH, SRC, 7, 1_780_000_010.0, Health(sent=7, dropped=2**62, started=5.0).to_body())
    )
    for i, f in enumerate(frames):
        w.add(f, EP, T0_NS + i * 10**9)
    w.close()
    info = run("recording", "info", path, "--json")
    assert info.returncode == 0, info.stderr
    drops = json.loads(info.stdout)["sources"][SRC]["drops"][EP]
    assert (drops["gaps"], drops["publisher_dropped"], drops["slow_consumer"]) == (3, 3, 0)
