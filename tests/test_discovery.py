"""Endpoint discovery: port ranges (one endpoint per port, as SGLang numbers ranks) and an endpoints
file that the live monitor follows as it changes. Real sockets on loopback, real files, the real
command line in a child process."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq
from conftest import HANG_GUARD_S, PATIENCE_S
from eagle3_top.tracer.reader.endpoints_file import EndpointsFile, EndpointsFileError, parse_endpoints
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import HELLO, STEP, Hello, SourceId, encode
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tracer.transport.endpoints import MAX_RANGE_PORTS, endpoint_list
from eagle3_top.tui.commands import demo
from eagle3_top.tui.feed import Feed
from stream_samples import hello, step
from zmq.utils.monitor import recv_monitor_message

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


# -- port ranges -----------------------------------------------------------------------------------


def test_a_range_expands_to_one_endpoint_per_port_each_once() -> None:
    good, bad = endpoint_list(["tcp://gpu-box:5557-5560", "10.0.0.5:6000-6001", "tcp://gpu-box:5558"])
    assert good == [
        "tcp://gpu-box:5557",
        "tcp://gpu-box:5558",
        "tcp://gpu-box:5559",
        "tcp://gpu-box:5560",
        "tcp://10.0.0.5:6000",
        "tcp://10.0.0.5:6001",
    ]
    assert bad == []
    assert endpoint_list(["[::1]:7000-7001", "ipc:///tmp/a-1"])[0] == [
        "tcp://[::1]:7000",
        "tcp://[::1]:7001",
        "ipc:///tmp/a-1",
    ]


@pytest.mark.parametrize(
    "text, why",
    [
        ("tcp://h:1-65535", f"'tcp://h:1-65535': 65535 ports in a range; at most {MAX_RANGE_PORTS}"),
        ("h:5564-5557", "'h:5564-5557': reversed port range (5564 > 5557)"),
        ("h:5557-70000", "'h:5557-70000': port 70000 is outside 1-65535"),
        ("h:0-3", "'h:0-3': port 0 is outside 1-65535"),
        ("h:5557-", "'h:5557-': not an endpoint"),
    ],
)
def test_a_bad_range_gets_one_line_and_the_rest_are_used(text: str, why: str) -> None:
    good, bad = endpoint_list([text, "h:9000-9001"])
    assert good == ["tcp://h:9000", "tcp://h:9001"]
    assert len(bad) == 1 and bad[0].startswith(why) and "\n" not in bad[0]


def test_the_widest_range_allowed_is_accepted() -> None:
    good, bad = endpoint_list([f"h:2000-{2000 + MAX_RANGE_PORTS - 1}"])
    assert not bad and len(good) == MAX_RANGE_PORTS


# -- the file --------------------------------------------------------------------------------------

FLEET = """\
# the fleet
tcp://10.0.0.5:5557-5558   # box 5, two ranks

10.0.0.6:5557
foo
tcp://10.0.0.7:99999
ipc:///run/e3t#1.sock
tcp://10.0.0.5:5558
"""


def test_file_lines_garbage_named_by_line_number_the_rest_used() -> None:
    eps, bad = parse_endpoints(FLEET, "fleet.txt")
    assert eps == [
        "tcp://10.0.0.5:5557",
        "tcp://10.0.0.5:5558",
        "tcp://10.0.0.6:5557",
        "ipc:///run/e3t#1.sock",  # a '#' inside a word is not a comment
    ]
    assert bad == [
        "fleet.txt:5: 'foo': not an endpoint (tcp://HOST:PORT, HOST:PORT, tcp://HOST:FIRST-LAST or ipc://PATH)",
        "fleet.txt:6: 'tcp://10.0.0.7:99999': port 99999 is outside 1-65535",
    ]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def write_atomically(path: Path, text: str) -> None:
    """As an editor saves: a new file renamed over the old one (a new inode)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_file_is_re_read_on_change_and_problems_said_once(tmp_path: Path) -> None:
    path = tmp_path / "eps"
    path.write_text("h:1\nh:2\n")
    clock = Clock()
    f = EndpointsFile(str(path), clock=clock)
    assert f.load() == ["tcp://h:1", "tcp://h:2"]
    clock.t += 1.0
    assert f.poll() is None  # unchanged
    write_atomically(path, "h:2\nh:3-4\nnope\n")
    assert f.poll() is None, "looked again before a second passed"
    clock.t += 1.0
    change = f.poll()
    assert change is not None
    assert (change.added, change.removed) == (["tcp://h:3", "tcp://h:4"], ["tcp://h:1"])
    assert (
        change.summary()
        == f"endpoints file {path}: +2 −1, 1 bad line ({path}:3: 'nope': not an endpoint "
        + ("(tcp://HOST:PORT, HOST:PORT, tcp://HOST:FIRST-LAST or ipc://PATH))")
    )
    assert f.endpoints == ["tcp://h:2", "tcp://h:3", "tcp://h:4"]

    path.unlink()
    clock.t += 1.0
    gone = f.poll()
    assert gone is not None and gone.added == gone.removed == []
    assert gone.summary() == f"endpoints file {path}: No such file or directory; keeping 3 endpoints"
    for _ in range(3):
        clock.t += 1.0
        assert f.poll() is None, "a vanished file is said once"
    assert f.endpoints == ["tcp://h:2", "tcp://h:3", "tcp://h:4"]

    path.write_text("")  # back, but naming nothing: an editor mid-save, say
    clock.t += 1.0
    empty = f.poll()
    assert empty is not None and empty.summary().endswith("names no endpoint now; keeping 3 endpoints")
    path.write_text("h:4\n")
    clock.t += 1.0
    back = f.poll()
    assert back is not None and back.fine
    assert (back.added, back.removed) == ([], ["tcp://h:2", "tcp://h:3"])


def test_an_unreadable_or_binary_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EndpointsFileError, match=r"eps: No such file or directory"):
        EndpointsFile(str(tmp_path / "eps")).load()
    binary = tmp_path / "bin"
    binary.write_bytes(b"h:1\n\xff\xfe\n")
    with pytest.raises(EndpointsFileError, match=r"bin: not UTF-8 text \(byte 4\)"):
        EndpointsFile(str(binary)).load()
    bom = tmp_path / "bom"
    bom.write_bytes(b"\xef\xbb\xbfh:1\r\nh:2\r\n")  # as Notepad saves it
    f = EndpointsFile(str(bom))
    assert f.load() == ["tcp://h:1", "tcp://h:2"] and f.bad == []


# -- the live feed follows the file -----------------------------------------------------------------


class Engine:
    """A PUB socket on loopback sending a hello and a step per ``send``, with a monitor socket that
    sees subscribers come and go."""

    def __init__(self, number: int) -> None:
        ctx = zmq.Context.instance()
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:0")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.src = f"box-{number}:{100 + number}:r0"
        self.key = self.src
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.accepted = self.disconnected = 0
        self.seq = 0

    def send(self) -> None:
        kind, body = (HELLO, hello().to_body()) if self.seq % 10 == 0 else (STEP, step(self.seq))
        self.sock.send(encode(kind, self.src, self.seq, time.time(), body))
        self.seq += 1
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)["event"]
            self.accepted += event == zmq.EVENT_ACCEPTED
            self.disconnected += event == zmq.EVENT_DISCONNECTED

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    es = [Engine(i) for i in range(3)]
    yield es
    for e in es:
        e.close()


def until(engines: list[Engine], cond: Callable[[], object], what: str, timeout: float = PATIENCE_S) -> None:
    """Keep the engines sending (a PUB drops what nobody hears) until ``cond``, or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in engines:
            e.send()
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_feed_connects_and_disconnects_as_the_file_changes(tmp_path: Path, engines: list[Engine]) -> None:
    e0, e1, e2 = engines
    path = tmp_path / "fleet.txt"
    path.write_text(f"{e0.endpoint}\n{e1.endpoint}\n")
    file = EndpointsFile(str(path), period_s=0.1)
    file.load()
    feed = Feed([])
    feed.follow_endpoints_file(file)
    feed.start()
    try:

        def sources() -> set[str]:
            return {s.key for s in feed.snapshot().sources}

        def endpoints() -> dict[str, str]:
            return dict(feed.snapshot().endpoints)

        until(engines, lambda: sources() == {e0.key, e1.key}, "the file's two engines")
        assert set(endpoints()) == {e0.endpoint, e1.endpoint}
        assert e2.accepted == 0

        write_atomically(path, f"# e0 retired\n{e1.endpoint}\n{e2.endpoint}\n")
        until(engines, lambda: e2.key in sources(), "the third engine, added to the file")
        until(engines, lambda: e0.disconnected >= 1, "the removed endpoint to be disconnected")
        assert set(endpoints()) == {e1.endpoint, e2.endpoint}
        assert feed.notice == f"endpoints file {path}: +1 −1"  # news, not an error
        assert feed.error is None
        steps = feed.book.sources[e0.key].steps

        path.unlink()
        until(engines, lambda: feed.error and "keeping" in feed.error, "the vanished file to be said")
        assert feed.error == f"endpoints file {path}: No such file or directory; keeping 2 endpoints"
        assert feed.notice is None
        seen = feed.book.sources[e2.key].steps
        until(engines, lambda: feed.book.sources[e2.key].steps > seen + 5, "steps after the file vanished")
        assert set(endpoints()) == {e1.endpoint, e2.endpoint}
        assert feed.book.sources[e0.key].steps == steps, "the removed engine is still heard"
    finally:
        feed.stop()


# -- the command line ------------------------------------------------------------------------------


def test_check_with_a_garbage_line_names_it_and_judges_the_good_endpoints(tmp_path: Path) -> None:
    pub = Publisher("tcp://127.0.0.1:0", SourceId("gate-host", 4242, 0, "test"), hello_interval_s=0.5)
    try:
        pub.set_hello(hello())
        path = tmp_path / "fleet.txt"
        path.write_text(f"# the gate's fleet\n{pub.bound_endpoint}\n\nnot-an-endpoint\n")
        proc = subprocess.Popen(
            [*CLI, "check", "--endpoints-file", str(path), "--steps", "10", "--timeout", "30", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        i = 0
        while proc.poll() is None and i < 3000:  # until it has heard enough (a PUB drops what nobody hears)
            pub.publish(STEP, step(i))
            i += 1
            time.sleep(0.01)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        pub.close()
    assert err.splitlines()[0] == (
        f"eagle3-top check: {path}:4: 'not-an-endpoint': not an endpoint "
        "(tcp://HOST:PORT, HOST:PORT, tcp://HOST:FIRST-LAST or ipc://PATH) (skipped)"
    )
    verdict = json.loads(out)
    assert proc.returncode == 0, err
    assert [s["key"] for s in verdict["sources"]] == ["gate-host:4242:r0"]
    assert verdict["sources"][0]["steps"] >= 10


def test_check_says_the_file_is_read_once_and_a_missing_one_is_one_line(tmp_path: Path) -> None:
    helptext = subprocess.run([*CLI, "check", "--help"], capture_output=True, text=True).stdout
    assert "read once, at start" in " ".join(helptext.split())
    r = subprocess.run(
        [*CLI, "check", "--endpoints-file", str(tmp_path / "none.txt")], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert (
        r.stderr == f"eagle3-top check: --endpoints-file {tmp_path / 'none.txt'}: No such file or directory\n"
    )


# -- the fleet demo --------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the engines need torch")
def test_the_fleet_demo_runs_engines_on_one_port_range_every_third_mis_wired(tmp_path: Path) -> None:
    from eagle3_top.hooks.toy import paths

    seen: dict[int, Hello] = {}
    shown: list[tuple[str, list[str]]] = []

    def show(d: demo.Demo, endpoints: list[str], manifest: object) -> None:
        shown.append((d.title, endpoints))
        sub = Subscriber(endpoints)
        deadline = time.monotonic() + PATIENCE_S
        try:
            while len(seen) < len(endpoints) and time.monotonic() < deadline:
                for ev in sub.poll(100):
                    if ev.kind == HELLO:
                        h = Hello.from_body(ev.body)
                        seen[int(ev.src.rsplit(":r", 1)[1])] = h
        finally:
            sub.close()

    err = io.StringIO()
    d = demo.Demo(
        fleet=3,
        first_port=23557,  # --port: the run of three starts there, or at the next free run after it
        rate=5.0,
        build_manifest=False,
        paths={"draft": paths.draft_dir(), "draft_ids_not_read": paths.draft_ids_not_read_dir()},
        tmp_root=str(tmp_path),
        err=err,
    )
    assert demo.run(d, show) == 0, err.getvalue()
    [(title, endpoints)] = shown
    first = int(endpoints[0].rsplit(":", 1)[1])
    assert first >= 23557
    assert endpoints == [f"tcp://127.0.0.1:{first + i}" for i in range(3)]
    assert title.endswith(f"a fleet of 3 on tcp://127.0.0.1:{first}-{first + 2}")
    # the draft's ids where SGLang reads them, but for every third engine
    assert {rank: h.aux.ids_location for rank, h in seen.items() if h.aux is not None} == {
        0: "eagle_config",
        1: "eagle_config",
        2: "top_level",
    }
    assert not list(tmp_path.iterdir()), "the demo left its temporary directory"
