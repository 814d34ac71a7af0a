"""``eagle3-top relay``: real publishers on loopback, through the relay (pyzmq's proxy), to real
subscribers; the command run as a user runs it, in a process of its own, where it matters."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import msgpack
import pytest
import zmq
from conftest import PATIENCE_S
from eagle3_top.tracer.reader.recording import RecordingWriter, read_recording
from eagle3_top.tracer.reader.relay import Relay
from eagle3_top.tracer.reader.relay_recorder import CaptureRecorder
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import STEP, SourceId, encode, peek
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tracer.transport import curve
from eagle3_top.tui.commands import relay as relay_cmd
from fifo_sink import pipe_half_full
from stream_samples import step

RELAY = [sys.executable, "-m", "eagle3_top.tui.cli", "relay"]


def until(cond: Callable[[], object], timeout: float = PATIENCE_S, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        time.sleep(0.02)


class Frames:
    """What one subscriber received, frame by frame, keyed by (source, seq)."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.by_key: dict[tuple[str, int], bytes] = {}

    def take(self) -> Frames:
        for frame in self.sub.recv_frames(20):
            env = peek(frame)
            assert env is not None, frame[:60]
            self.by_key[(env.src, env.seq)] = frame
        return self

    def steps(self) -> dict[tuple[str, int], bytes]:
        return {k: f for k, f in self.by_key.items() if peek(f).kind == STEP}  # type: ignore[union-attr]


def publish_until_heard(pubs: list[Publisher], frames: list[Frames], timeout: float = PATIENCE_S) -> None:
    """A step from every publisher until every subscriber has heard every source: the relay's
    connections and the subscriptions are live."""
    srcs = {p.src for p in pubs}
    deadline = time.monotonic() + timeout
    while not all(srcs <= {src for src, _ in f.take().by_key} for f in frames):
        assert time.monotonic() < deadline, [sorted({s for s, _ in f.by_key}) for f in frames]
        for p in pubs:
            p.publish(STEP, step(0))
        time.sleep(0.05)


@pytest.fixture
def publishers() -> Iterator[list[Publisher]]:
    pubs = [
        Publisher("tcp://127.0.0.1:0", SourceId(host="gpu-box", pid=100 + r, rank=r, engine="sglang"))
        for r in range(3)
    ]
    yield pubs
    for p in pubs:
        p.close()


@pytest.fixture
def subs() -> Iterator[Callable[..., Subscriber]]:
    made: list[Subscriber] = []

    def make(endpoints: list[str], **kw: object) -> Subscriber:
        made.append(Subscriber(endpoints, **kw))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for s in made:
        s.close()


class RelayProcess:
    """The command in a child process; its stderr lines collected by a thread."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [*RELAY, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def line(self, pattern: str, timeout: float = PATIENCE_S) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found.extend(m for line in self.lines if (m := re.search(pattern, line)))
            return bool(found) or self.proc.poll() is not None

        until(seen, timeout, f"{pattern!r} in {self.lines}")
        assert found, f"{pattern!r} not in {self.lines} (exit {self.proc.returncode})"
        return found[0]

    @property
    def endpoint(self) -> str:
        return self.line(r"relaying .* to (tcp://\S+)").group(1)

    def stop(self, signum: int | None = signal.SIGTERM) -> int:
        """Send ``signum`` (None: wait for the command to end by itself); its exit code."""
        if signum is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)
        code = self.proc.wait(20)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def relay_process() -> Iterator[Callable[[list[str]], RelayProcess]]:
    started: list[RelayProcess] = []

    def start(args: list[str]) -> RelayProcess:
        started.append(RelayProcess(args))
        return started[-1]

    yield start
    for r in started:
        r.kill()


def test_every_source_arrives_byte_for_byte(publishers, subs) -> None:
    """Three publishers, one relay: a subscriber of the relay gets each source under its own key,
    every frame the same bytes as a subscriber connected to the publishers themselves."""
    relay = Relay("tcp://127.0.0.1:0", [p.bound_endpoint for p in publishers])
    relay.start()
    try:
        direct = Frames(subs([p.bound_endpoint for p in publishers]))
        relayed = Frames(subs([relay.bound_endpoint]))
        publish_until_heard(publishers, [direct, relayed])
        for i in range(1, 51):
            for p in publishers:
                p.publish(STEP, step(i, batch=8))

        def the_fifty(f: Frames) -> dict[tuple[str, int], bytes]:
            return {k: v for k, v in f.take().steps().items() if msgpack.unpackb(v)["step"] >= 1}

        until(lambda: all(len(the_fifty(f)) == 150 for f in (direct, relayed)), what="50 steps of each")
        assert {src for src, _ in the_fifty(relayed)} == {p.src for p in publishers}
        assert the_fifty(relayed) == the_fifty(direct)  # the same frames, byte for byte
        # the Subscriber decodes them as it would from the publishers: no malformed frame, no loss
        assert relayed.sub.malformed == 0
        counts = relay.counts()
        assert counts.received >= len(relayed.by_key) and counts.sent == counts.received
    finally:
        relay.stop()
    assert not relay.running


def test_record_and_sigterm_close_the_recording_whole(publishers, subs, relay_process, tmp_path) -> None:
    """--record through the command, stopped by SIGTERM: the file is closed whole (its summary
    written) and holds every frame the relay forwarded, byte for byte as its subscriber got them;
    `recording info` reads each source."""
    out = tmp_path / "relayed.mcap"
    relay = relay_process(
        ["--bind", "tcp://127.0.0.1:0", "--record", str(out), "--quiet", "--connect"]
        + [p.bound_endpoint for p in publishers]
    )
    got = Frames(subs([relay.endpoint]))
    publish_until_heard(publishers, [got])
    for i in range(1, 201):
        for p in publishers:
            p.publish(STEP, step(i))
    until(lambda: len(got.take().steps()) >= 600, what="the steps through the relay")
    assert relay.stop() == 0
    summary = relay.line(r"recorded ([\d,]+) frames to .*; 0 not recorded")
    forwarded = int(
        relay.line(r"stopped \(signal SIGTERM\): ([\d,]+) frames forwarded").group(1).replace(",", "")
    )
    assert int(summary.group(1).replace(",", "")) == forwarded

    reader = read_recording(str(out))
    frames = list(reader)
    assert reader.report.summary  # closed whole: the footer is there
    assert len(frames) == forwarded
    by_key = {(e.src, e.seq): f.data for f in frames if (e := peek(f.data)) is not None}
    assert all(by_key[k] == data for k, data in got.steps().items())
    assert {f.topic for f in frames} == {p.src for p in publishers}

    info_out = tmp_path / "info.json"
    code = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "recording", "info", str(out), "--json"],
        stdout=info_out.open("w"),
        check=False,
    ).returncode
    assert code == 0
    info = json.loads(info_out.read_text())
    assert info["frames"] == forwarded
    assert set(info["sources"]) == {p.src for p in publishers}
    # the recorder's own account travels in the file: it wrote every frame the relay forwarded
    assert info["recorder"]["frames"] == forwarded and info["recorder"]["not_written"] == 0


def test_curve_on_both_sides(tmp_path, subs, relay_process) -> None:
    """Upstream the relay is an admitted CURVE client of the publisher; downstream a CURVE server
    of its own: an admitted subscriber gets the stream, one with other keys or none gets nothing."""
    up_pub, up_sec = curve.generate(str(tmp_path / "up"), "publisher")
    curve.generate(str(tmp_path / "up-clients"), "relay")
    down_pub, down_sec = curve.generate(str(tmp_path / "down"), "relay-server")
    curve.generate(str(tmp_path / "down-clients"), "alice")
    curve.generate(str(tmp_path / "others"), "mallory")
    pub = Publisher(
        "tcp://127.0.0.1:0",
        SourceId(host="gpu-box", pid=7, rank=0, engine="sglang"),
        curve=curve.server_config(up_sec, str(tmp_path / "up-clients")),
        hello_interval_s=0.5,
    )
    try:
        relay = relay_process(
            ["--bind", "tcp://127.0.0.1:0", "--connect", pub.bound_endpoint, "--quiet",
             "--curve-server-key", up_pub, "--curve-client-secret", str(tmp_path / "up-clients" / "relay.key_secret"),
             "--curve-secret", down_sec, "--curve-clients", str(tmp_path / "down-clients")]
        )  # fmt: skip
        ep = relay.endpoint
        alice = Frames(
            subs([ep], curve=curve.client(down_pub, str(tmp_path / "down-clients" / "alice.key_secret")))
        )
        mallory = subs([ep], curve=curve.client(down_pub, str(tmp_path / "others" / "mallory.key_secret")))
        keyless = subs([ep])
        publish_until_heard([pub], [alice])
        for i in range(1, 21):
            pub.publish(STEP, step(i))
        until(lambda: len(alice.take().steps()) >= 20, what="alice's steps")
        heard: list[bytes] = []

        def mallory_refused() -> bool:
            for s in (mallory, keyless):
                heard.extend(s.recv_frames(10))
            return mallory.endpoints[ep] == "refused by the server (CURVE: key not admitted)"

        until(mallory_refused, what="mallory refused")
        for s in (mallory, keyless):  # as long again as alice took for her 20 steps, or longer
            heard.extend(s.recv_frames(200))
        assert heard == []
        # the relay logs each refused key once, as a publisher does (a plain-text client too, when
        # its server end sees why: libzmq's client often hangs up first; test_curve covers that)
        relay.line(
            r"refused CURVE client \S+: its public key is not among the certificates in .*down-clients"
        )
    finally:
        pub.close()


def test_bind_in_use_is_one_line(relay_process) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        relay = relay_process(["--bind", f"tcp://127.0.0.1:{port}", "--connect", "tcp://127.0.0.1:5557"])
        code = relay.stop(None)
    assert code == 2
    assert relay.lines == [f"eagle3-top relay: cannot bind tcp://127.0.0.1:{port}: address in use"]


def test_refuses_a_public_bind_unless_asked(capsys) -> None:
    code = relay_cmd.main(["--bind", "tcp://0.0.0.0:5599", "--connect", "127.0.0.1:5557"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "tcp://0.0.0.0:5599 is reachable from other machines; add --public" in err[0]


def test_bad_endpoints_named_one_line_each(capsys) -> None:
    code = relay_cmd.main(["--bind", "tcp://127.0.0.1:0", "--connect", "nowhere", "tcp://h:99999"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "eagle3-top relay: 'nowhere': not an endpoint (tcp://HOST:PORT, HOST:PORT, tcp://HOST:FIRST-LAST "
        "or ipc://PATH) (skipped)",
        "eagle3-top relay: 'tcp://h:99999': port 99999 is outside 1-65535 (skipped)",
        "eagle3-top relay: no valid endpoint",
    ]


def test_status_line_names_a_down_upstream(publishers, subs, relay_process) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    relay = relay_process(
        ["--bind", "tcp://127.0.0.1:0", "--status-interval", "0.3", publishers[0].bound_endpoint, dead]
    )
    got = Frames(subs([relay.endpoint]))
    publish_until_heard(publishers[:1], [got])
    line = relay.line(rf"[1-9][\d,]* frames forwarded, [\d,]+/s; upstream 1 of 2 connected \({dead} ")
    assert "down" in line.string or "connecting" in line.string
    assert relay.stop(signal.SIGINT) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe capacity is read the Linux way")
def test_a_stalled_recorder_never_stalls_forwarding(tmp_path, subs) -> None:
    """The recording goes into a pipe nobody reads: the recorder blocks on its first chunk. The
    relay still forwards every frame, and the frames the recorder missed are counted, exactly."""
    fifo = str(tmp_path / "stalled.mcap")
    os.mkfifo(fifo)
    drain = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the writer's open returns
    upstream = zmq.Context.instance().socket(zmq.PUB)
    upstream.setsockopt(zmq.SNDHWM, 0)
    upstream.bind("tcp://127.0.0.1:0")
    relay = Relay("tcp://127.0.0.1:0", [upstream.getsockopt_string(zmq.LAST_ENDPOINT)], capture_hwm=1000)
    assert relay.capture_endpoint is not None
    recorder = CaptureRecorder(relay.context, relay.capture_endpoint, RecordingWriter(fifo), "up", 1000)
    recorder.start()
    relay.start()
    kept = bytearray()
    try:
        sub = subs([relay.bound_endpoint], rcvhwm=0)
        frames = [encode(STEP, "gpu-box:1:r0", i, 1.78e9 + i, step(i, batch=32)) for i in range(7000)]
        seqs: set[int] = set()

        def heard(timeout_ms: int) -> int:
            seqs.update(peek(f).seq for f in sub.recv_frames(timeout_ms, 10_000))  # type: ignore[union-attr]
            return len(seqs)

        until(lambda: upstream.send(frames[0]) or heard(20), what="the relay's first frame")
        for f in frames[1:1000]:
            upstream.send(f)
        until(lambda: recorder.frames >= 1000, what="the recorder taking the first 1,000 frames")
        # within a second it writes its first chunk, ~0.5 MB: more than the pipe holds, so it blocks
        until(lambda: pipe_half_full(drain), what="the recorder writing its first chunk")
        for f in frames[1000:]:
            upstream.send(f)
        until(lambda: heard(50) == 7000, what="every frame through the relay")
        assert recorder.running and recorder.frames < 1100  # it stood still meanwhile
    finally:
        counts = relay.stop()

        def read_all() -> None:
            while True:
                try:
                    chunk = os.read(drain, 1 << 16)
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                if not chunk:
                    return
                kept.extend(chunk)

        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        recorder.stop(counts.received)
        reader.join(10)
        os.close(drain)
        upstream.close(0)
    missed = recorder.not_recorded(counts.received)
    # at most the capture's two marks (socket and reader: 2,000 frames) waited for it
    assert missed >= 7000 - 1100 - 2000 and recorder.frames + missed == counts.received
    assert recorder.error is None
    copy = tmp_path / "kept.mcap"
    copy.write_bytes(bytes(kept))
    recorded = read_recording(str(copy))
    assert len(list(recorded)) == recorder.frames and recorded.report.summary
    # what it did not write is in the file too, for `recording info` to say
    assert recorded.report.recorder is not None
    assert recorded.report.recorder["not_written"] == missed > 0
    assert recorded.report.recorder["frames"] + missed == counts.received
    shown = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "recording", "info", str(copy)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert f"{missed:,} received and not written (the recorder fell behind" in shown.stdout, shown.stdout


def test_an_upstream_that_refuses_the_relay_is_named(tmp_path, relay_process) -> None:
    """A publisher that does not admit the relay's key: said at once, even with --quiet."""
    server_pub, server_sec = curve.generate(str(tmp_path / "server"), "publisher")
    curve.generate(str(tmp_path / "clients"), "someone-else")
    _, relay_sec = curve.generate(str(tmp_path / "relay"), "relay")
    pub = Publisher(
        "tcp://127.0.0.1:0",
        SourceId(host="gpu-box", pid=7, rank=0, engine="sglang"),
        curve=curve.server_config(server_sec, str(tmp_path / "clients")),
    )
    try:
        relay = relay_process(
            ["--bind", "tcp://127.0.0.1:0", "--quiet", "--connect", pub.bound_endpoint,
             "--curve-server-key", server_pub, "--curve-client-secret", relay_sec]
        )  # fmt: skip
        relay.line(rf"upstream {pub.bound_endpoint}: refused by the server \(CURVE: key not admitted\)")
        assert relay.stop() == 0
    finally:
        pub.close()
