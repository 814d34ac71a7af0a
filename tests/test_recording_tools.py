"""Reading recordings back: the reader on files of a newer version, of another tool, of no format at
all, with a summary that lies, with a damaged record length mid-file, and while still being written;
and the two commands on them, `recording info` and `dump`, run as a user runs them, in a child process."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from eagle3_top.tracer.reader.recording import (
    NotARecording,
    RecordingReader,
    RecordingWriter,
    UnsupportedRecording,
    read_recording,
)
from eagle3_top.tracer.schema import (
    AUX,
    HEALTH,
    HELLO,
    PROBE,
    STEP,
    DecodeError,
    Fingerprint,
    Health,
    aux_body,
    decode,
    encode,
    probe_body,
)
from mcap.writer import Writer
from patience import HANG_GUARD_S
from test_recording import chunk_offsets, hello, step, write_chunks

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
T0 = 1_780_000_000 * 10**9  # receive time of a recording's first frame
EP = "tcp://127.0.0.1:5557"
GARBAGE = b"\xc1 not msgpack"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def one_line(out: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == code and len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    for w in words:
        assert w in lines[0], lines[0]


def seqs(path: str) -> list[int]:
    return [decode(f.data).seq for f in read_recording(path)]


def summary_records(path: str) -> dict[int, list[int]]:
    """Offsets of the summary's records by opcode, found through the footer."""
    data = open(path, "rb").read()
    _, _, start, _, _ = struct.unpack_from("<BQQQI", data, len(data) - 8 - 29)
    out: dict[int, list[int]] = {}
    pos = start
    while True:
        op, length = struct.unpack_from("<BQ", data, pos)
        if op == 0x02:
            return out
        out.setdefault(op, []).append(pos)
        pos += 9 + length


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


# -- what is not a recording, or not one this version reads ----------------------------------------


def stock_file(
    path: str, *, profile: str, schema: str, topic: str, frames: list[bytes], chunked: bool = True
) -> None:
    """An MCAP file written by the mcap library's own Writer, not by ours."""
    with open(path, "wb") as f:
        w = Writer(f, use_chunking=chunked)
        w.start(profile=profile, library="another tool")
        sid = w.register_schema(schema, "ros2msg", b"string data")
        cid = w.register_channel(topic, "cdr", sid)
        for i, data in enumerate(frames):
            w.add_message(cid, log_time=T0 + i, data=data, publish_time=T0 + i, sequence=i)
        w.finish()


def test_a_newer_stream_version_is_refused_in_one_line(tmp_path: Path) -> None:
    path = str(tmp_path / "v2.mcap")
    frame = encode(STEP, "h:1:r0", 0, 1000.0, step(0))
    stock_file(path, profile="eagle3-top", schema="eagle3-top/v2", topic="h:1:r0", frames=[frame])
    with pytest.raises(UnsupportedRecording) as exc:
        list(read_recording(path))
    assert str(exc.value) == (
        f"{path}: recorded with stream version v2, this eagle3-top reads up to v1: upgrade eagle3-top"
    )
    for cmd in (["recording", "info"], ["dump"]):
        one_line(run(*cmd, path), 2, "stream version v2", "upgrade eagle3-top")

    same = str(tmp_path / "v1.mcap")  # the stock writer with our profile and version: read as ours
    stock_file(same, profile="eagle3-top", schema="eagle3-top/v1", topic="h:1:r0", frames=[frame])
    rec = read_recording(same)
    assert [f.data for f in rec] == [frame] and rec.report.stream_version == 1 and rec.report.complete


@pytest.mark.parametrize("chunked", [True, False])
def test_another_tools_mcap_is_read_and_its_frames_do_not_decode(tmp_path: Path, chunked: bool) -> None:
    path = str(tmp_path / "ros.mcap")
    frames = [b"\x00\x01\x00\x00" + bytes([i, 200 - i, 7]) for i in range(5)]
    # a schema named like ours, in a file of another profile: not taken for a newer eagle3-top
    stock_file(
        path, profile="ros2", schema="eagle3-top/v9", topic="/chatter\x1b[2J", frames=frames, chunked=chunked
    )
    rec = read_recording(path)
    assert [(f.topic, f.data) for f in rec] == [("/chatter\x1b[2J", d) for d in frames]
    assert rec.report.complete and rec.report.profile == "ros2" and rec.report.stream_version is None

    out = run("recording", "info", path, "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["undecodable"] == 5 and got["profile"] == "ros2" and got["kinds"] == {"undecodable": 5}
    human = run("recording", "info", path)
    assert "not an eagle3-top recording (profile 'ros2')" in human.stdout
    assert "\x1b" not in human.stdout and "/chatter\\x1b[2J" in human.stdout  # a hostile topic, escaped

    dumped = run("dump", path, "--json")
    assert dumped.returncode == 0
    objs = [json.loads(ln) for ln in dumped.stdout.splitlines()]
    assert [(o["kind"], o["source"], o["length"], o["hex"]) for o in objs] == [
        ("undecodable", "/chatter\x1b[2J", len(d), d.hex()) for d in frames
    ]
    assert all(o["seq"] is None and o["body"] is None and o["error"] for o in objs)
    assert "not an eagle3-top recording" in dumped.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file, not a recording"),
        (b"abc", "not an MCAP file (bad magic)"),
        (b"\x89MC", "3 bytes, too short to be a recording"),
        (b"step,seq\n1,2\n" * 20, "not an MCAP file (bad magic)"),
        (None, "a directory, not a recording"),
    ],
)
def test_what_is_no_recording_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "x.mcap"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(NotARecording, match=re.escape(message)):
        list(read_recording(str(path)))
    for cmd in (["recording", "info"], ["dump"]):
        one_line(run(*cmd, str(path)), 2, message)


def test_zero_frames_is_a_complete_recording(tmp_path: Path) -> None:
    path = str(tmp_path / "none.mcap")
    RecordingWriter(path).close()
    rec = read_recording(path)
    assert list(rec) == [] and rec.report.complete and rec.report.frames == 0
    assert rec.report.stream_version == 1  # its schema is only in the summary: no chunk was written
    out = run("recording", "info", path)
    assert out.returncode == 0 and "0 frames" in out.stdout, out.stdout + out.stderr
    out = run("dump", path)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""


# -- a summary that disagrees with the chunks ------------------------------------------------------


def test_a_summary_that_disagrees_with_the_chunks_is_reported(tmp_path: Path) -> None:
    path = str(tmp_path / "lying.mcap")
    write_chunks(path, chunks=3, per_chunk=10)
    (stats,) = summary_records(path)[0x0B]
    patch(path, stats + 9, struct.pack("<Q", 1200))  # Statistics.message_count
    rec = read_recording(path)
    assert seqs(path) == list(range(30))  # every frame still read: the scan never trusts the index
    list(rec)
    assert rec.report.index_mismatch == ["summary says 1200 frames, the chunks hold 30"]
    assert rec.report.summary and not rec.report.complete
    assert rec.report.to_json()["index_mismatch"] == rec.report.index_mismatch

    out = run("recording", "info", path)
    assert out.returncode == 3 and "summary says 1200 frames, the chunks hold 30" in out.stdout
    out = run("dump", path)
    assert out.returncode == 3 and len(out.stdout.splitlines()) == 30
    assert out.stderr.strip() == f"eagle3-top dump: {path}: summary says 1200 frames, the chunks hold 30"


def test_a_chunk_index_pointing_elsewhere_is_reported(tmp_path: Path) -> None:
    path = str(tmp_path / "moved.mcap")
    write_chunks(path, chunks=3, per_chunk=10)
    real = [off for off, _ in chunk_offsets(path)]
    index = summary_records(path)[0x08]
    patch(path, index[1] + 9 + 16, struct.pack("<Q", real[1] + 5))  # ChunkIndex.chunk_start_offset
    rec = read_recording(path)
    assert len(list(rec)) == 30
    assert rec.report.index_mismatch == [
        f"summary indexes a chunk at byte {real[1] + 5} that is not there",
        f"the chunk at byte {real[1]} is missing from the summary's index",
    ]


# -- damaged record framing in the middle of a file -----------------------------------------------


@pytest.mark.parametrize(
    "damage",
    ["flipped length", "short length", "unknown opcode"],
)
def test_a_damaged_record_length_mid_file_is_stepped_over(tmp_path: Path, damage: str) -> None:
    path = str(tmp_path / "resync.mcap")
    write_chunks(path, chunks=5, per_chunk=10)
    offsets = chunk_offsets(path)
    off, _ = offsets[2]
    if damage == "flipped length":
        length = open(path, "rb").read()[off + 1 : off + 9]
        patch(path, off + 1, bytes(b ^ 0xFF for b in length))  # runs far past the end of the file
    elif damage == "short length":
        patch(path, off + 1, struct.pack("<Q", 100))  # lands inside the chunk's compressed bytes
    else:
        patch(path, off, b"\x42")
    rec = read_recording(path)
    got = [decode(f.data).seq for f in rec]
    assert got == list(range(20)) + list(range(30, 50))  # the chunks after the damage still read
    skipped = offsets[3][0] - off
    assert rec.report.skipped == [(off, skipped)] and rec.report.summary and not rec.report.complete
    assert rec.report.index_mismatch == []  # the index entry of the lost chunk is inside the skipped bytes

    out = run("recording", "info", path, "--json")
    assert out.returncode == 3
    got_json = json.loads(out.stdout)
    assert got_json["report"]["skipped"] == [{"offset": off, "bytes": skipped}]
    assert f"{skipped} bytes skipped at byte {off}" in got_json["lost"][0]


def test_a_damaged_length_of_the_last_chunk_resumes_at_the_summary(tmp_path: Path) -> None:
    path = str(tmp_path / "last.mcap")
    write_chunks(path, chunks=3, per_chunk=10)
    off, _ = chunk_offsets(path)[2]
    patch(path, off + 1, struct.pack("<Q", 1 << 40))
    rec = read_recording(path)
    assert [decode(f.data).seq for f in rec] == list(range(20))
    assert rec.report.summary and rec.report.unreadable_tail == 0 and len(rec.report.skipped) == 1


def test_a_cut_off_file_is_still_a_cut_off_tail(tmp_path: Path) -> None:
    path = str(tmp_path / "cut.mcap")
    write_chunks(path, chunks=4, per_chunk=10)
    off, length = chunk_offsets(path)[3]
    os.truncate(path, off + length - 7)
    rec = read_recording(path)
    assert len(list(rec)) == 30
    assert rec.report.skipped == [] and rec.report.unreadable_tail == length - 7
    assert rec.report.tail_inside == "chunk"


# -- following a file that is being written ---------------------------------------------------------


def test_read_available_follows_a_file_being_written(tmp_path: Path) -> None:
    path = str(tmp_path / "live.mcap")
    w = RecordingWriter(path, flush_interval_s=0)
    reader = RecordingReader(path)
    assert reader.read_available() == []  # nothing on disk yet: not written, not broken
    sent = [encode(STEP, "h:1:r0", i, 1000.0 + i, step(i)) for i in range(12)]
    for i in range(5):
        w.add(sent[i], EP, T0 + i)
    w.tick()
    first = reader.read_available()
    assert [f.data for f in first] == sent[:5] and reader.report.pending_tail == 0
    assert reader.read_available() == []  # nothing new
    for i in range(5, 12):
        w.add(sent[i], EP, T0 + i)
        if i == 8:
            w.tick()
    w.tick()
    second = reader.read_available()
    # the channel was defined in the first chunk, read by the first call: still known
    assert [(f.topic, f.endpoint, f.data) for f in second] == [("h:1:r0", EP, d) for d in sent[5:]]
    assert not reader.report.summary and not reader.report.final
    w.close()
    assert reader.read_available() == [] and reader.report.complete and reader.report.final
    assert reader.report.frames == 12


def test_a_record_past_the_end_waits_until_it_is_whole(tmp_path: Path) -> None:
    whole = str(tmp_path / "whole.mcap")
    write_chunks(whole, chunks=3, per_chunk=10)
    data = open(whole, "rb").read()
    off, length = chunk_offsets(whole)[1]
    growing = str(tmp_path / "growing.mcap")
    reader = RecordingReader(growing)
    open(growing, "wb").write(data[:3])  # not even the magic yet
    assert reader.read_available() == []
    with open(growing, "ab") as f:
        f.write(data[3 : off + length // 2])  # cut inside the second chunk
    assert [decode(r.data).seq for r in reader.read_available()] == list(range(10))
    assert reader.report.pending_tail == length // 2 and reader.report.unreadable_tail == 0
    assert "not whole yet" in " ".join(reader.report.describe())
    with open(growing, "ab") as f:
        f.write(data[off + length // 2 :])
    assert [decode(r.data).seq for r in reader.read_available()] == list(range(10, 30))
    assert reader.report.complete and reader.report.pending_tail == 0


def test_finish_turns_a_pending_tail_into_a_lost_one(tmp_path: Path) -> None:
    whole = str(tmp_path / "whole.mcap")
    write_chunks(whole, chunks=3, per_chunk=10)
    off, length = chunk_offsets(whole)[2]
    cut = str(tmp_path / "killed.mcap")
    open(cut, "wb").write(open(whole, "rb").read()[: off + 40])
    reader = RecordingReader(cut)
    assert len(reader.read_available()) == 20 and reader.report.pending_tail == 40
    assert reader.finish() == []
    rep = reader.report
    assert rep.final and rep.pending_tail == 0 and rep.unreadable_tail == 40 and rep.tail_inside == "chunk"
    assert reader.read_available() == []  # final stays final

    short = tmp_path / "short.mcap"
    short.write_bytes(b"\x89MCAP")
    reader = RecordingReader(str(short))
    assert reader.read_available() == []
    with pytest.raises(NotARecording, match="5 bytes, too short"):
        reader.finish()


# -- dump: filters, JSON lines, a closed pipe ------------------------------------------------------


def _fingerprint(seed: int) -> Fingerprint:
    rng = np.random.default_rng(seed)
    return Fingerprint(
        rows=64, slots=3, slot_width=16, mean=tuple(rng.normal(size=3)), rms=tuple(rng.uniform(1, 2, 3)),
        std=tuple(rng.uniform(0.5, 1, 3)), absmax=tuple(rng.uniform(3, 4, 3)), nan=(0, 0, 0), inf=(0, 0, 0),
        sketch=tuple(tuple(rng.normal(size=16)) for _ in range(3)),
    )  # fmt: skip


class Session:
    """A recording of two sources with every kind, an unknown kind and garbage, frames 0.1 s apart."""

    def __init__(self, path: str) -> None:
        rng = np.random.default_rng(11)
        self.path = path
        self.probe_rows = rng.standard_normal((5, 3 * 16)).astype(np.float32)
        self.probe_ids = rng.integers(1, 30_000, 5).astype(np.int32)
        self.steps: dict[int, dict[str, object]] = {}
        w = RecordingWriter(path)
        frames: list[tuple[str, bytes]] = []
        a, b = "gpu-a:11:r0", "gpu-b:22:r1"
        frames.append((a, encode(HELLO, a, 0, 1000.0, hello().to_body())))
        for i in range(1, 8):
            self.steps[i] = step(i)
            frames.append((a, encode(STEP, a, i, 1000.0 + i, self.steps[i])))
        frames.append((a, encode(AUX, a, 8, 1008.0, aux_body(7, "verify_aux", _fingerprint(8)))))
        frames.append((b, encode(HEALTH, b, 100, 1009.0, Health(sent=100, dropped=0, started=5.0).to_body())))
        body = probe_body(rid="e3t-probe-0-x", rows=self.probe_rows, slots=3, slot_width=16, offset=2,
                          input_ids=self.probe_ids)  # fmt: skip
        frames.append((b, encode(PROBE, b, 101, 1010.0, body)))
        frames.append((b, encode("telemetry", b, 102, 1011.0, {"x": b"\x01\x02", "f": float("nan")})))
        frames.append(("", GARBAGE))
        for k, (_, frame) in enumerate(frames):
            w.add(frame, EP, T0 + k * 100_000_000)
        w.close()
        self.count = len(frames)


@pytest.fixture
def session(tmp_path: Path) -> Session:
    return Session(str(tmp_path / "session.mcap"))


def dump_json(*args: str) -> list[dict[str, object]]:
    out = run("dump", *args, "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(ln) for ln in out.stdout.splitlines()]


def test_dump_prints_every_frame_in_file_order(session: Session) -> None:
    out = run("dump", session.path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == session.count
    assert lines[0].startswith("+0.000s gpu-a:11:r0 hello seq=0 engine test 1; EAGLE3 steps 3")
    assert lines[1].startswith("+0.100s gpu-a:11:r0 step seq=1 step 1: batch 4, width 4, accept length")
    assert lines[8].startswith("+0.800s gpu-a:11:r0 aux seq=8 step 7 at verify_aux: 64 rows, 3 slots of 16")
    assert lines[9].startswith("+0.900s gpu-b:22:r1 health seq=100 sent 100, dropped 0")
    assert lines[10].startswith("+1.000s gpu-b:22:r1 probe seq=101 e3t-probe-0-x: 5 rows from position 2")
    assert lines[11].startswith("+1.100s gpu-b:22:r1 telemetry seq=102 a kind this eagle3-top does not know")
    assert lines[12].startswith(f"+1.200s undecodable undecodable 13 bytes {GARBAGE.hex()}: not msgpack")


def test_dump_json_decodes_the_columns_to_the_arrays_encoded(session: Session) -> None:
    objs = dump_json(session.path)
    assert [o["kind"] for o in objs] == ["hello"] + ["step"] * 7 + [
        "aux",
        "health",
        "probe",
        "telemetry",
        "undecodable",
    ]
    first = objs[1]
    assert set(first) == {
        "log_time_ns",
        "publish_time_ns",
        "source",
        "endpoint",
        "kind",
        "seq",
        "ts",
        "body",
        "length",
    }
    for o in objs[1:8]:
        body, sent = o["body"], session.steps[o["seq"]]
        assert isinstance(body, dict)
        batch, n = sent["batch"], sent["n"]
        for key, shape in (("draft", (batch, n)), ("accepted", (batch,)), ("tokens", (-1,))):
            want = np.frombuffer(sent[key], dtype="<i4").reshape(shape)
            assert np.array_equal(np.array(body[key], dtype=np.int32), want) and body[key] == want.tolist()
        assert body["parents"] is None and body["rids"] == sent["rids"]
        assert o["log_time_ns"] == T0 + o["seq"] * 100_000_000 and o["ts"] == 1000.0 + o["seq"]
        assert o["publish_time_ns"] == int(o["ts"] * 1e9) and o["endpoint"] == EP
    probe = objs[10]["body"]
    assert isinstance(probe, dict)
    want_aux = session.probe_rows.astype("<f2").astype(np.float32)
    assert np.array_equal(np.array(probe["aux"], dtype=np.float32), want_aux)
    assert probe["input_ids"] == session.probe_ids.tolist() and probe["rid"] == "e3t-probe-0-x"
    assert objs[8]["body"]["mean"] == list(_fingerprint(8).mean)
    assert objs[11]["body"] == {"x": "0102", "f": "NaN"}  # other bytes as hex, NaN as a string
    bad = objs[12]
    assert bad["source"] == "undecodable" and bad["length"] == len(GARBAGE) and bad["hex"] == GARBAGE.hex()


def test_dump_filters_by_kind_source_and_time(session: Session) -> None:
    assert [o["kind"] for o in dump_json(session.path, "--kind", "step")] == ["step"] * 7
    kinds = [o["kind"] for o in dump_json(session.path, "--kind", "hello,health", "--kind", "undecodable")]
    assert kinds == ["hello", "health", "undecodable"]
    assert [o["kind"] for o in dump_json(session.path, "--kind", "unknown")] == ["telemetry"]
    assert {o["source"] for o in dump_json(session.path, "--source", "gpu-b")} == {"gpu-b:22:r1"}
    assert [o["kind"] for o in dump_json(session.path, "--source", "gpu-*:r1", "--kind", "probe")] == [
        "probe"
    ]
    assert (
        dump_json(session.path, "--source", "gpu-*") != []
        and dump_json(session.path, "--source", "gpu-?") == []
    )
    assert [o["seq"] for o in dump_json(session.path, "--since", "0.95")] == [101, 102, None]
    iso = "2026-05-28T20:26:41Z"  # T0 + 1.0 s
    assert [o["seq"] for o in dump_json(session.path, "--since", iso)] == [101, 102, None]
    assert [o["seq"] for o in dump_json(session.path, "--since", "2026-05-28T22:26:41.100+02:00")] == [
        102,
        None,
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kind", "steps"], "kinds are aux, health, hello, probe, step, undecodable, unknown"),
        (["--since", "yesterday"], "neither seconds from the first frame nor an ISO time"),
        (["--since", "-1"], "0 or more"),
    ],
)
def test_dump_bad_flags_are_usage_errors(session: Session, args: list[str], message: str) -> None:
    out = run("dump", session.path, *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_dump_into_a_closed_pipe_stops_quietly(tmp_path: Path) -> None:
    path = str(tmp_path / "big.mcap")
    write_chunks(path, chunks=10, per_chunk=300)  # megabytes of JSON: far more than a pipe holds
    proc = subprocess.Popen([*CLI, "dump", path, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()  # what `| head -n 2` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=HANG_GUARD_S) == 0
    assert err == "" and [json.loads(h)["seq"] for h in head] == [0, 1]


def test_dump_survives_a_body_nested_deeper_than_python_recurses(tmp_path: Path) -> None:
    path = str(tmp_path / "deep.mcap")
    w = RecordingWriter(path)
    deep = b"\x91" * 990 + b"\x01"  # a list in a list ... 990 deep: msgpack reads it, json.dumps cannot
    head = encode("odd", "h:1:r0", 0, 1000.0, {"x": 1})
    assert head[0] == 0x86  # a map of six keys: the envelope's five and x
    frame = b"\x87" + head[1:] + b"\xa1y" + deep  # and a seventh, y
    with pytest.raises(DecodeError, match="nested deeper than 32 levels"):
        decode(frame)  # refused where it arrives: no reader recurses into it
    w.add(frame, EP, T0)
    w.close()
    (obj,) = dump_json(path)
    assert obj["kind"] == "undecodable" and obj["body"] is None
    assert obj["error"] == "odd seq 0: nested deeper than 32 levels" and obj["hex"]
    out = run("dump", path)
    assert (
        out.returncode == 0 and "Traceback" not in out.stderr and "nested deeper than 32 levels" in out.stdout
    )


def test_recording_info_counts_drops_per_source(tmp_path: Path) -> None:
    path = str(tmp_path / "gaps.mcap")
    w = RecordingWriter(path)
    a, b = "gpu-a:11:r0", "gpu-b:22:r1"
    frames = [encode(HEALTH, a, 0, 1000.0, Health(sent=0, dropped=3, started=5.0).to_body())]
    frames += [encode(STEP, a, i, 1000.0 + i, step(i)) for i in range(1, 10) if i not in (4, 5)]
    frames.append(encode(HEALTH, a, 10, 1010.0, Health(sent=10, dropped=4, started=5.0).to_body()))
    frames += [encode(STEP, b, 100 + i, 1000.0 + i, step(i)) for i in range(3)]  # joined late
    for k, frame in enumerate(frames):
        w.add(frame, EP, T0 + k * 10**9)
    w.close()
    out = run("recording", "info", path, "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    da = got["sources"][a]["drops"][EP]
    assert (da["gaps"], da["publisher_dropped"], da["slow_consumer"], da["late_join"]) == (2, 1, 1, 0)
    db = got["sources"][b]["drops"][EP]
    assert (db["gaps"], db["late_join"]) == (0, 100)
    assert got["kinds"] == {"health": 2, "step": 10}
    assert got["span"]["span_s"] == len(frames) - 1 and got["span"]["start"] == "2026-05-28T20:26:40.000Z"
    human = run("recording", "info", path).stdout
    assert "drops: 1 lost in transit (a slow reader or the link); 1 dropped by the tracer" in human
    assert "joined late (100 events before)" in human
    assert "span: 2026-05-28T20:26:40.000Z to 2026-05-28T20:26:51.000Z, 11.0 s" in human


def test_recording_takes_a_known_subcommand() -> None:
    one_line(run("recording"), 2, "needs a subcommand")
    one_line(run("recording", "inf", "x.mcap"), 2, "unknown subcommand 'inf'")
    out = run("recording", "--help")
    assert out.returncode == 0 and "info" in out.stdout
