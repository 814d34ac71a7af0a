"""`eagle3-top record` and `recording info`: real publishers on loopback, the real command line in a child
process, the files read back by the stock `mcap` reader and by ours, whole, killed and damaged."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from eagle3_top.tracer.reader.recording import SCHEMA_NAME, UNDECODABLE, RecordingWriter, read_recording
from eagle3_top.tracer.schema import (
    STEP,
    SourceId,
    decode,
    encode,
)
from eagle3_top.tracer.serving.publisher import Publisher
from mcap.reader import make_reader
from patience import HANG_GUARD_S, PATIENCE_S
from stream_samples import hello, step

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
GARBAGE = b"\xc1 not msgpack"


class Stream:
    """A publisher stepping at ~100 Hz, a raw PUB sending garbage, and a plain SUB on both that
    keeps every frame with its receive time: what a recorder should have seen."""

    def __init__(self) -> None:
        self.pub = Publisher("tcp://127.0.0.1:0", SourceId("rec-host", 77, 0, "test"), hello_interval_s=0.3)
        self.pub.set_hello(hello())
        ctx = zmq.Context.instance()
        self.raw = ctx.socket(zmq.PUB)
        self.raw.setsockopt(zmq.LINGER, 0)
        self.raw.bind("tcp://127.0.0.1:0")
        self.endpoints = [self.pub.bound_endpoint, self.raw.getsockopt_string(zmq.LAST_ENDPOINT)]
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        for ep in self.endpoints:
            self.sub.connect(ep)
        self.seen: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._publish), threading.Thread(target=self._listen)]
        for t in self._threads:
            t.start()

    def _publish(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.pub.publish(STEP, step(i))
            if i % 20 == 0:
                self.raw.send(GARBAGE)
            i += 1
            time.sleep(0.01)

    def _listen(self) -> None:
        while not self._stop.is_set():
            if self.sub.poll(20):
                self.seen.append((time.time(), self.sub.recv()))

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self.sub.close()
        self.raw.close()
        self.pub.close()


@pytest.fixture
def stream() -> Iterator[Stream]:
    s = Stream()
    time.sleep(0.3)  # the plain SUB connects before any recorder does, so it sees a superset
    yield s
    s.close()


def record(stream: Stream, path: str, seconds: float, sig: int) -> tuple[subprocess.Popen[str], float]:
    proc = subprocess.Popen(
        [*CLI, "record", *stream.endpoints, "-o", path], stderr=subprocess.PIPE, text=True
    )
    time.sleep(seconds)
    sent = time.time()
    proc.send_signal(sig)
    proc.wait(timeout=HANG_GUARD_S)
    return proc, sent


def info(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "recording", "info", *args], capture_output=True, text=True, timeout=HANG_GUARD_S
    )


def test_sigterm_closes_cleanly_and_frames_are_byte_identical(stream: Stream, tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "run.mcap")
    proc, _ = record(stream, path, 2.5, signal.SIGTERM)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    seen = {data for _, data in stream.seen}
    with open(path, "rb") as f:
        reader = make_reader(f)  # the stock reader, through the summary section
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        assert [s.name for s in summary.schemas.values()] == [SCHEMA_NAME]
        by_topic = {c.topic: c for c in summary.channels.values()}
        assert set(by_topic) == {"rec-host:77:r0", UNDECODABLE}
        assert by_topic["rec-host:77:r0"].metadata["endpoint"] == stream.endpoints[0]
        assert by_topic[UNDECODABLE].metadata["endpoint"] == stream.endpoints[1]
        assert all(c.message_encoding == "msgpack" for c in by_topic.values())
        msgs = [(ch.topic, m) for _, ch, m in reader.iter_messages(log_time_order=False)]
    assert len(msgs) == summary.statistics.message_count > 50
    for topic, m in msgs:
        assert m.data in seen  # byte for byte what a plain SUB received
        if topic == UNDECODABLE:
            assert m.data == GARBAGE and m.publish_time == m.log_time
        else:
            ev = decode(m.data)
            assert encode(ev.kind, ev.src, ev.seq, ev.ts, ev.body) == m.data
            assert m.publish_time == int(ev.ts * 1e9) <= m.log_time
    ours = read_recording(path)
    assert [(r.topic, r.log_time_ns, r.data) for r in ours] == [(t, m.log_time, m.data) for t, m in msgs]
    assert ours.report.complete

    out = info(path, "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    src = got["sources"]["rec-host:77:r0"]
    assert src["kinds"]["step"] > 50 and src["kinds"]["hello"] >= 1
    assert src["undecodable"] == 0 and src["endpoints"] == [stream.endpoints[0]]
    assert src["drops"][stream.endpoints[0]]["received"] == src["frames"]  # every frame's seq counted
    assert got["kinds"]["step"] == src["kinds"]["step"] and got["span"]["span_s"] > 1
    assert got["undecodable"] == got["sources"][UNDECODABLE]["frames"] >= 1
    assert got["lost"] == [] and got["report"]["summary"] is True


def test_sigkill_loses_at_most_the_last_second(stream: Stream, tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "killed.mcap")
    _, killed = record(stream, path, 3.0, signal.SIGKILL)
    frames = [r.data for r in read_recording(path)]
    assert len(frames) > 50
    # the first frame only it can be: every garbage frame has the same bytes (the recorder may
    # have heard the raw endpoint before the publisher's)
    first = next(t for t, data in stream.seen if data == next(f for f in frames if f != GARBAGE))
    # everything a plain SUB received from the recording's first frame until 1.5 s before the kill
    expected = [data for t, data in stream.seen if first <= t < killed - 1.5]
    assert expected and set(expected) <= set(frames)

    out = info(path)
    assert out.returncode == 3
    assert "no summary section (recorder killed" in out.stdout
    assert "rec-host:77:r0" in out.stdout and "undecodable frames:" in out.stdout


def chunk_offsets(path: str) -> list[tuple[int, int]]:
    """(offset, length) of each chunk record, by walking the record framing."""
    data = open(path, "rb").read()
    pos, out = 8, []
    while pos + 9 <= len(data):
        op, length = struct.unpack_from("<BQ", data, pos)
        if op == 0x06:
            out.append((pos, 9 + length))
        if op == 0x02:
            break
        pos += 9 + length
    return out


def write_chunks(path: str, chunks: int, per_chunk: int) -> None:
    w = RecordingWriter(path, flush_interval_s=0)
    for c in range(chunks):
        for i in range(per_chunk):
            n = c * per_chunk + i
            w.add(encode(STEP, "h:1:r0", n, 1000.0 + n, step(n)), "tcp://127.0.0.1:1", 10**18 + n)
        w.tick()
    w.close()


def test_damaged_chunk_is_skipped_and_reported(tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "flipped.mcap")
    write_chunks(path, chunks=5, per_chunk=20)
    offsets = chunk_offsets(path)
    assert len(offsets) == 5
    off, length = offsets[2]
    with open(path, "r+b") as f:
        f.seek(off + length // 2)
        f.write(b"\xff" * 16)
    rec = read_recording(path)
    seqs = [decode(r.data).seq for r in rec]
    assert seqs == list(range(40)) + list(range(60, 100))  # the chunks after the bad one still read
    assert len(rec.report.bad_chunks) == 1 and rec.report.bad_chunks[0][0] == off
    assert rec.report.summary and not rec.report.complete
    # what was lost, in frames and in receive time (the chunk's header survives its data)
    lines = rec.report.describe()
    assert "it held the frames received 2001-09-09 01:46:40.000 to 01:46:40.000 UTC" in lines[0]
    assert "20 frames lost (the summary counts 100)" in lines

    out = info(path, "--json")
    assert out.returncode == 3
    got = json.loads(out.stdout)
    assert got["sources"]["h:1:r0"]["frames"] == 80
    assert got["lost"][0].startswith(f"bad chunk at byte {off} skipped")
    assert got["report"]["lost_frames"] == 20
    # the seq gap across the lost chunk is the file's loss, not the network's
    drops = got["sources"]["h:1:r0"]["drops"]["tcp://127.0.0.1:1"]
    assert drops["in_file"] == 20 and drops["slow_consumer"] == 0
    assert drops["describe"] == "20 lost with a damaged part of the file"


def test_file_cut_inside_a_chunk(tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "cut.mcap")
    write_chunks(path, chunks=3, per_chunk=10)
    off, length = chunk_offsets(path)[2]
    os.truncate(path, off + length // 2)
    rec = read_recording(path)
    assert len(list(rec)) == 20
    assert rec.report.unreadable_tail == length // 2 and rec.report.tail_inside == "chunk"
    out = info(path)
    assert out.returncode == 3
    assert f"file ends inside a chunk record: {length // 2} bytes unreadable" in out.stdout
    assert "no summary section" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["record", "127.0.0.1:1"], "required: -o"),
        (["record", "nonsense", "-o", "x.mcap"], "no valid endpoint"),
        (["record", "127.0.0.1:1", "--duration", "-1", "-o", "x.mcap"], "positive number"),
        (["dump", "/nonexistent.mcap"], "No such file"),
        (["recording", "info", "/nonexistent.mcap"], "No such file"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 2 and message in out.stderr


def test_record_refuses_to_overwrite(tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "exists.mcap")
    open(path, "wb").close()
    out = subprocess.run([*CLI, "record", "127.0.0.1:1", "-o", path], capture_output=True, text=True)
    assert out.returncode == 2 and "--force" in out.stderr and os.path.getsize(path) == 0


def test_a_second_recorder_on_the_same_file_leaves_the_first_whole(stream: Stream, tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "shared.mcap")
    first = subprocess.Popen(
        [*CLI, "record", *stream.endpoints, "-o", path], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + PATIENCE_S
    while not os.path.exists(path) or os.path.getsize(path) < 1000:  # the first chunks are out
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    # even --force, which would truncate an idle file, must not touch one a recorder holds
    second = subprocess.run(
        [*CLI, "record", *stream.endpoints, "-o", path, "--force", "--duration", "1"],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert second.returncode == 2 and "another recorder is writing it" in second.stderr, second.stderr
    time.sleep(0.5)
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=HANG_GUARD_S)
    assert first.returncode == 0
    reader = read_recording(path)
    assert sum(1 for _ in reader) > 20 and reader.report.complete  # not a byte of the second in it


def test_record_into_a_directory_it_cannot_write(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    for target in (str(not_a_dir / "run.mcap"), "/proc/run.mcap"):
        out = subprocess.run([*CLI, "record", "127.0.0.1:1", "-o", target], capture_output=True, text=True)
        assert out.returncode == 2 and f"cannot write {target}" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_frames_outlive_a_lost_channel_definition(tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "first-chunk.mcap")
    write_chunks(path, chunks=3, per_chunk=10)
    off, length = chunk_offsets(path)[0]  # the chunk that defined the channel
    with open(path, "r+b") as f:
        f.seek(off + length // 2)
        f.write(b"\x00" * 16)
    rec = read_recording(path)
    frames = list(rec)
    assert [decode(r.data).seq for r in frames] == list(range(10, 30))
    assert {r.topic for r in frames} == {"channel 1 (definition lost)"}
    assert rec.report.orphan_frames == 20 and len(rec.report.bad_chunks) == 1


def test_file_cut_inside_the_summary(tmp_path: Path) -> None:
    path = os.path.join(str(tmp_path), "summary-cut.mcap")
    write_chunks(path, chunks=2, per_chunk=10)
    os.truncate(path, os.path.getsize(path) - 4)
    rec = read_recording(path)
    assert len(list(rec)) == 20  # the data section is whole
    assert not rec.report.summary and rec.report.tail_inside == "summary"


def test_rotation_by_time_makes_complete_parts(stream: Stream, tmp_path: Path) -> None:
    path = str(tmp_path / "run.mcap")
    proc = subprocess.Popen(
        [*CLI, "record", *stream.endpoints, "-o", path, "--rotate-time", "1", "--duration", "3.6"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, err
    parts = [path] + [str(tmp_path / f"run.{i}.mcap") for i in range(1, 4)]
    assert all(os.path.exists(p) for p in parts[:3]), sorted(os.listdir(tmp_path))
    spans = []
    for p in parts:
        if not os.path.exists(p):
            continue
        out = info(p, "--json")
        assert out.returncode == 0, out.stdout  # every part closed cleanly, with its summary
        times = [f.log_time_ns for f in read_recording(p)]
        if times:
            spans.append((min(times), max(times)))
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), "parts overlap in time"
    assert "in 4 files" in err or "in 5 files" in err


def test_a_full_disk_is_one_line_not_a_traceback(stream: Stream) -> None:
    r = subprocess.run(
        [*CLI, "record", *stream.endpoints, "-o", "/dev/full", "--force", "--duration", "3"],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "No space left on device" in r.stderr.strip().splitlines()[-1]
