"""The recorder's fast path: ``schema.peek`` routes frames exactly as ``decode`` would, our chunked
MCAP writer's files read in the stock reader (indexes, statistics, summary), and ``record`` says at
stop how many frames its sources numbered that it never received, overloaded too. Speed is measured by
benchmarks/bench_record.py and benchmarks/bench_record_e2e.py, not here."""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
import zstandard
from conftest import HANG_GUARD_S, PATIENCE_S, poll_until
from eagle3_top.tracer.reader.recording import (
    UNDECODABLE,
    RecordingReader,
    RecordingWriter,
    SeqGaps,
    read_recording,
)
from eagle3_top.tracer.reader.recording.chunked import ChunkedMcapWriter
from eagle3_top.tracer.schema import HEALTH, STEP, DecodeError, Envelope, decode, encode, peek, step_body
from eagle3_top.tracer.schema.health import Health
from fifo_sink import FifoSink
from fuzz_frames import frames
from mcap.reader import make_reader

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def verdict(frame: bytes) -> tuple[str, str, int, float] | None:
    try:
        ev = decode(frame)
    except DecodeError:
        return None
    return ev.kind, ev.src, ev.seq, ev.ts


def peeked(frame: bytes) -> tuple[str, str, int, float] | None:
    env = peek(frame)
    return None if env is None else (env.kind, env.src, env.seq, env.ts)


def step_frame(seq: int, src: str = "h:1:r0", batch: int = 8) -> bytes:
    rng = np.random.default_rng(seq)
    acc = rng.integers(0, 4, batch).astype(np.int32)
    body = step_body(
        step=seq, rids=[f"req-{r}" for r in range(batch)],
        draft=rng.integers(1, 32_000, (batch, 4)).astype(np.int32), accept_lens=acc + 1,
        tokens=rng.integers(1, 32_000, int(acc.sum()) + batch).astype(np.int32),
    )  # fmt: skip
    return encode(STEP, src, seq, 1.7e9 + seq, body)


def byte_mutants(seed: int, count: int) -> list[bytes]:
    """Valid frames with a byte flipped, inserted, dropped or appended: invalid UTF-8 inside a rid,
    a length that runs past the end, trailing bytes, a type byte turned into another type."""
    rng = random.Random(seed)
    base = [step_frame(i, batch=rng.randint(0, 6)) for i in range(32)]
    out = []
    for _ in range(count):
        b = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 3)):
            op, i = rng.random(), rng.randrange(len(b))
            if op < 0.5:
                b[i] = rng.getrandbits(8)
            elif op < 0.7:
                b.insert(i, rng.getrandbits(8))
            elif op < 0.9:
                del b[i]
            else:
                b += bytes([rng.getrandbits(8)])
        out.append(bytes(b))
    return out


def nested(depth: int) -> list[object]:
    out: list[object] = []
    for _ in range(depth - 1):
        out = [out]
    return out


EDGE_CASES = [
    msgpack.packb({"v": 1, "kind": "step", "src": "h:1:r0", "seq": 1, "ts": 2.0, "rids": ["ok"]}),
    encode(STEP, "h:1:r0", 3, 2.0, {"rids": ["a"]})[:-2] + b"\xa2\xff\xfe",  # invalid UTF-8 in a rid
    encode(STEP, "h:1:r0", 3, 2.0, {}) + b"\x00",  # a trailing byte
    # an unhashable key (a list) after a valid envelope
    b"\x86\xa1v\x01\xa4kind\xa4step\xa3src\xa1h\xa3seq\x01\xa2ts\xcb%b\x91\x01\x01" % struct.pack(">d", 1.0),
    # a repeated envelope key: the last one wins, in decode as in peek
    b"\x86\xa1v\x01\xa4kind\xa4step\xa3src\xa1h\xa3seq\x01\xa2ts\x05\xa1v\x02",
    b"\x86\xa1v\x02\xa4kind\xa4step\xa3src\xa1h\xa3seq\x01\xa2ts\x05\xa1v\x01",
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": 1, "ts": 7}),  # an int ts
    msgpack.packb({"v": 1.0, "kind": "step", "src": "h", "seq": 1, "ts": 7.0}),
    msgpack.packb({"v": True, "kind": "step", "src": "h", "seq": 1, "ts": 7.0}),
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": True, "ts": 7.0}),
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": 2**63, "ts": 7.0}),
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": 2**63 - 1, "ts": 2**64 - 1}),
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": 1, "ts": math.nan}),
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": 1, "ts": -math.inf}),
    msgpack.packb({"v": 1, "kind": "x" * 33, "src": "h", "seq": 1, "ts": 1.0}),
    msgpack.packb({"v": 1, "kind": "", "src": "h" * 257, "seq": 1, "ts": 1.0}),
    msgpack.packb({"v": 1, "kind": "", "src": "", "seq": 1, "ts": 1.0}),
    msgpack.packb({"v": 1, "kind": "health", "src": "\x1b]0;pwned\x07", "seq": 1, "ts": 1.0}),
    msgpack.packb({"v": 1, "kind": b"step", "src": "h", "seq": 1, "ts": 1.0}),
    msgpack.packb({b"v": 1, "kind": "step", "src": "h", "seq": 1, "ts": 1.0}),
    msgpack.packb({"v": 1, "kind": "step", "src": "h", "seq": 1, "ts": 1.0, 1: {2: 3}}),
    b"\x81\xd4\xff\x00\x01",  # a timestamp ext of a bad length
    msgpack.packb([1, "step", "h", 1, 1.0]),
    b"",
    # an unknown key nested as deep as a frame may (32 levels), one deeper, 600 deeper
    encode(STEP, "h:1:r0", 3, 2.0, {"x": nested(32)}),
    encode(STEP, "h:1:r0", 3, 2.0, {"x": nested(33)}),
    encode(STEP, "h:1:r0", 3, 2.0, {"x": [{"y": nested(600)}]}),
]


@pytest.mark.parametrize("frame", EDGE_CASES)
def test_peek_agrees_with_decode_on_edge_cases(frame: bytes) -> None:
    assert peeked(frame) == verdict(frame)


def test_peek_agrees_with_decode_on_fuzzed_frames() -> None:
    accepted = rejected = 0
    for f in [*frames(seed=13, count=20_000), *byte_mutants(seed=13, count=20_000)]:
        want = verdict(f)
        assert peeked(f) == want, f[:80]
        accepted += want is not None
        rejected += want is None
    assert accepted > 8_000 and rejected > 8_000, "both verdicts must be exercised"


def test_recorded_topic_is_decodes_verdict(tmp_path: Path) -> None:
    path = str(tmp_path / "fuzz.mcap")
    fs = [*frames(seed=14, count=3_000), *byte_mutants(seed=14, count=3_000)]
    w = RecordingWriter(path, flush_interval_s=0)
    for i, f in enumerate(fs):
        env = w.add(f, "tcp://127.0.0.1:1", 10**18 + i)
        assert (env is None) == (verdict(f) is None)
        if i % 500 == 0:
            w.tick()
    w.close()
    got = list(read_recording(path))
    assert [r.data for r in got] == fs
    for r, f in zip(got, fs, strict=True):
        v = verdict(f)
        assert r.topic == (UNDECODABLE if v is None else v[1])
        assert r.log_time_ns >= 10**18


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_files_read_whole_in_the_stock_reader(tmp_path: Path, compression: str) -> None:
    path = str(tmp_path / f"stock-{compression}.mcap")
    w = RecordingWriter(path, flush_interval_s=0, compression=compression)
    sent: list[tuple[str, int, bytes]] = []
    for i in range(600):
        src = f"h{i % 3}:1:r0"
        f = step_frame(i, src)
        w.add(f, f"tcp://127.0.0.1:{i % 2 + 1}", 10**18 + 1000 * (600 - i))  # log times falling
        sent.append((src, 10**18 + 1000 * (600 - i), f))
        if i % 97 == 0:
            w.tick()
    w.close()
    with open(path, "rb") as fh:
        reader = make_reader(fh)
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        stats = summary.statistics
        assert stats.message_count == 600 and stats.chunk_count == len(summary.chunk_indexes) > 5
        assert stats.message_start_time == 10**18 + 1000 and stats.message_end_time == 10**18 + 600_000
        assert sum(stats.channel_message_counts.values()) == 600 and len(summary.channels) == 6
        assert {c.metadata["endpoint"] for c in summary.channels.values()} == {
            "tcp://127.0.0.1:1", "tcp://127.0.0.1:2",
        }  # fmt: skip
        expected = "" if compression == "none" else compression
        assert {ci.compression for ci in summary.chunk_indexes} == {expected}
        # log-time order goes through the chunk indexes and the message indexes
        ordered = [(ch.topic, m.log_time, m.data) for _, ch, m in reader.iter_messages(log_time_order=True)]
    assert ordered == sorted(sent, key=lambda t: t[1])
    check_message_indexes(path, summary)


def check_message_indexes(path: str, summary) -> None:  # type: ignore[no-untyped-def]
    """Every message index entry points at a message record of its channel with its log time."""
    data = open(path, "rb").read()
    for ci in summary.chunk_indexes:
        body = data[ci.chunk_start_offset + 9 : ci.chunk_start_offset + ci.chunk_length]
        start, end, size, crc, clen = struct.unpack_from("<QQQII", body)
        comp = body[32 : 32 + clen].decode()
        (dlen,) = struct.unpack_from("<Q", body, 32 + clen)
        raw = body[40 + clen : 40 + clen + dlen]
        if comp == "zstd":
            raw = zstandard.decompress(raw)
        elif comp == "lz4":
            import lz4.frame

            raw = lz4.frame.decompress(raw)
        assert len(raw) == size
        # compressed chunks carry the compressor's checksum instead of MCAP's CRC (0: not computed)
        assert crc == (zlib.crc32(raw) if comp == "" else 0)
        for cid, off in ci.message_index_offsets.items():
            op, _length, ch, n = struct.unpack_from("<BQHI", data, off)
            assert op == 0x07 and ch == cid
            entries = struct.unpack_from(f"<{n // 8}Q", data, off + 15)
            for log_time, pos in zip(entries[::2], entries[1::2], strict=True):
                rop, _rlen, rch, _seq, rlog = struct.unpack_from("<BQHIQ", raw, pos)
                assert (rop, rch, rlog) == (0x05, cid, log_time) and start <= log_time <= end


def test_definitions_after_the_last_message_are_in_the_summary(tmp_path: Path) -> None:
    path = str(tmp_path / "late.mcap")
    with open(path, "wb") as fh:
        w = ChunkedMcapWriter(fh, profile="p", library="l", chunk_size=1 << 20, compression="zstd")
        s = w.register_schema("s", "text", b"x")
        w.add_message(w.register_channel("a", "msgpack", s, {}), 5, b"\x90", 5, 0)
        w.flush()
        w.register_channel("b", "msgpack", s, {})  # never used
        w.finish()
    with open(path, "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None and {c.topic for c in summary.channels.values()} == {"a", "b"}
    assert [r.topic for r in read_recording(path)] == ["a"]


def env(seq: int, src: str = "s", kind: str = STEP, fields: dict[str, object] | None = None) -> Envelope:
    return Envelope(kind, src, seq, 1.0, fields or {})


def test_seq_gaps_count_holes_per_endpoint_and_source() -> None:
    g = SeqGaps()
    for seq in (0, 1, 2, 5, 6, 4):  # 3 missed; 4 arrives late, as a periodic event may
        g.see("tcp://a:1", env(seq))
    for seq in (10, 12):  # the same source through another endpoint: counted there on its own
        g.see("tcp://b:1", env(seq))
    assert g.missed == 2
    losses = g.losses()
    assert set(losses) == {("tcp://a:1", "s"), ("tcp://b:1", "s")}
    assert losses[("tcp://a:1", "s")].slow_consumer == 1
    health = Health(sent=9, dropped=3, queue=0, queue_max=8, started=5.0).to_body()
    g.see("tcp://a:1", env(7, kind=HEALTH, fields=health))
    g.see("tcp://a:1", env(9))
    g.see("tcp://a:1", env(10, kind=HEALTH, fields={**health, "dropped": 4}))
    assert g.losses()[("tcp://a:1", "s")].publisher_dropped == 1  # seq 8, the tracer's own drop


def test_seq_gaps_stay_bounded_and_keep_what_they_forget() -> None:
    g = SeqGaps(max_sources=16)
    for i in range(100):
        g.see("e", env(0, src=f"s{i}"))
        g.see("e", env(2, src=f"s{i}"))  # one missed each
    assert len(g.sources) <= 16 and g.evictions.total >= 84
    assert g.missed == 100


def test_record_says_how_many_frames_it_missed(tmp_path: Path) -> None:
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.XPUB)  # XPUB: its subscription message says when the recorder has joined
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:0")
    ep = pub.getsockopt_string(zmq.LAST_ENDPOINT)
    path = str(tmp_path / "gaps.mcap")
    proc = subprocess.Popen([*CLI, "record", ep, "-o", path], stderr=subprocess.PIPE, text=True)
    last = 156
    try:
        assert pub.poll(int(PATIENCE_S * 1000)), "the recorder never subscribed"
        pub.recv()
        for seq in range(150):
            pub.send(step_frame(seq, "gap-host:1:r0", batch=2))
        for s in (150, 151, 155, last):  # 152 .. 154 never sent
            pub.send(step_frame(s, "gap-host:1:r0", batch=2))
        pub.send(b"\xc1 garbage")

        def recorded_last() -> bool:  # the recorder closes a chunk a second: the file shows it
            with contextlib.suppress(Exception):
                return any((e := peek(f.data)) is not None and e.seq == last for f in read_recording(path))
            return False

        poll_until(recorded_last, "the last frame in the recording")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        pub.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    stop = next(line for line in err.splitlines() if "stopped" in line)
    assert stop.endswith(", 3 missed"), stop
    n = int(stop.split(": ")[-1].split(" frames")[0])
    assert n == sum(1 for _ in read_recording(path)) > 100
    assert "gap-host:1:r0 via " in err and "3 lost in transit" in err
    assert os.path.getsize(path) > 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe capacity is read the Linux way")
def test_record_overloaded_writes_what_it_can_and_counts_the_rest(tmp_path: Path) -> None:
    """The recording goes into a pipe the test stops reading: the recorder stands still at its next
    chunk, as one past its ceiling does. Its socket fills to its bound and the publisher's socket
    drops the rest; once the pipe flows again it writes on. Every frame sent is in the file or
    counted as missed, in the stop line, in the file's own account and in `recording info`."""
    sink = FifoSink(str(tmp_path / "slow.mcap"), str(tmp_path / "kept.mcap"))
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:0")
    ep = pub.getsockopt_string(zmq.LAST_ENDPOINT)
    proc = subprocess.Popen(
        [*CLI, "record", ep, "-o", str(tmp_path / "slow.mcap"), "--force"], stderr=subprocess.PIPE, text=True
    )
    reader = RecordingReader(sink.copy)
    in_file: dict[str, set[int]] = {}

    def heard(src: str, seq: int) -> bool:
        for rec in reader.read_available():
            env = peek(rec.data)
            if env is not None:
                in_file.setdefault(env.src, set()).add(env.seq)
        return seq in in_file.get(src, ())

    body = msgpack.unpackb(step_frame(0, batch=64), raw=False)
    body = {k: v for k, v in body.items() if k not in ("v", "kind", "src", "seq", "ts")}
    sent = 0

    def send(src: str) -> int:
        nonlocal sent
        pub.send(encode(STEP, src, sent, time.time(), body))
        sent += 1
        return sent - 1

    joined = 0

    def join() -> bool:
        """A frame of another source, until one is in the file: the recorder has subscribed."""
        nonlocal joined
        pub.send(encode(STEP, "join:1:r0", joined, time.time(), body))
        joined += 1
        time.sleep(0.05)
        heard("join:1:r0", 0)
        return bool(in_file)

    def blocked() -> bool:
        """One more frame; the recorder has written a chunk the pipe cannot take: it stands still."""
        send("flood:2:r0")
        return sink.full()

    try:
        poll_until(join, "the recorder's first frame in the file")
        sink.pause()
        poll_until(blocked, "the recorder blocked on its next chunk")
        for _ in range(40_000):  # ~90 MB: past the socket's bound and the kernel's buffers (~40 MB)
            send("flood:2:r0")
        flooded = sent
        sink.resume()
        while True:  # one frame at a time until the last one sent is in the file: nothing after it
            last = send("flood:2:r0")
            with contextlib.suppress(AssertionError):
                poll_until(lambda last=last: heard("flood:2:r0", last), "the last frame sent", timeout=3.0)
                break
            assert sent < flooded + 100, "the recorder never wrote a frame again"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
        sink.finish()
        heard("", -1)  # whatever the close wrote
    finally:
        pub.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    stop = re.search(r"stopped \(signal SIGTERM\): (\d+) frames, \d+ bytes, (\d+) missed", err)
    assert stop is not None, err
    frames, missed = int(stop.group(1)), int(stop.group(2))
    lost = re.search(r"flood:2:r0 via \S+: (\d+) lost in transit", err)
    assert lost is not None, err
    written = len(in_file["flood:2:r0"])
    # it wrote what it could and counted the rest: every frame sent is one or the other
    assert 0 < int(lost.group(1)) == missed and written + missed == sent
    assert frames == sum(len(seqs) for seqs in in_file.values())
    info = subprocess.run(
        [*CLI, "recording", "info", sink.copy], capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert (
        f"recorder: {frames:,} frames written, 0 received and not written, {missed:,} missed" in info.stdout
    )
    assert f"{missed} lost in transit" in info.stdout, info.stdout


def test_the_recorders_account_is_read_back_and_odd_counts_are_left_out(tmp_path: Path) -> None:
    """A clean close writes the recorder's account (an MCAP metadata record the stock reader lists
    too); counts that are not plain whole numbers (a hostile file) are left out, not trusted."""
    path = str(tmp_path / "account.mcap")
    w = RecordingWriter(path)
    for i in range(3):
        w.add(step_frame(i), "ep")
    w.close(not_written=7, missed=2)
    rec = read_recording(path)
    assert len(list(rec)) == 3 and rec.report.complete
    assert rec.report.recorder == {"frames": 3, "not_written": 7, "missed": 2}
    with open(path, "rb") as f:
        assert [m.name for m in make_reader(f).iter_metadata()] == ["eagle3-top/recorder"]

    hostile = str(tmp_path / "hostile.mcap")
    with open(hostile, "wb") as f:
        cw = ChunkedMcapWriter(f, profile="eagle3-top", library="x", chunk_size=1 << 20, compression="")
        cw.add_metadata(
            "eagle3-top/recorder", {"frames": "\u0661\u0662", "not_written": "-5", "missed": "9" * 40}
        )
        cw.finish()
    rec = read_recording(hostile)
    list(rec)
    assert rec.report.recorder == {} and rec.report.complete
