"""``eagle3-top export``: real msgpack frames over real ZeroMQ on loopback, the real exporter, a
real HTTP GET of /metrics parsed by prometheus_client's own parser; and the docs' alert rules and
dashboard held to the names it exports."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
import zmq
from conftest import HANG_GUARD_S, PATIENCE_S
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.manifest import Manifest, load_manifest
from eagle3_top.tracer.export.counters import RestartSafe
from eagle3_top.tracer.export.exporter import Exporter
from eagle3_top.tracer.export.feed import RCVHWM, ExportFeed
from eagle3_top.tracer.export.lag import FoldLag
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import HEALTH, HELLO, STEP, AuxWiring, Hello, SourceId, encode
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tracer.transport import curve
from eagle3_top.tui.feed import Feed
from prometheus_client.parser import text_string_to_metric_families
from stream_samples import hello, step

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
MANIFEST = ROOT / "examples" / "demo-manifest.json"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=PATIENCE_S) as r:
        assert r.status == 200
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def get(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``; None when there is none."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else None


def value(samples: Samples, name: str, **labels: str) -> float:
    v = get(samples, name, **labels)
    assert v is not None, f"no {name}{labels}"
    return v


def wait_for(cond: Callable[[], object], what: str, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Source:
    """One source id publishing through a raw PUB socket: every seq, body and health is the test's."""

    def __init__(self, sock: zmq.Socket, key: str, seq: int = 0) -> None:
        self.sock, self.key, self.seq = sock, key, seq

    def send(self, kind: str, body: dict[str, object], ts: float | None = None) -> None:
        """``ts``: the publisher's stamp (now unless given)."""
        self.sock.send(encode(kind, self.key, self.seq, time.time() if ts is None else ts, body))
        self.seq += 1

    def hello_until(self, seen: Callable[[], bool], h: Hello | None = None) -> None:
        """Hellos until the subscriber has joined and heard one (a PUB drops what precedes a join)."""

        def heard() -> bool:
            if seen():
                return True
            self.send(HELLO, (h or hello()).to_body())
            return False

        wait_for(heard, f"{self.key} heard")


def in_export(exp: Exporter, key: str) -> Callable[[], bool]:
    return lambda: any(s.key == key for s in exp.feed.figures().sources)


@pytest.fixture
def pub(raw_pub: tuple[zmq.Socket, str]) -> tuple[zmq.Socket, str]:
    return raw_pub


@pytest.fixture
def manifest() -> Manifest:
    return load_manifest(str(MANIFEST))


def start_exporter(
    endpoint: str, manifest: Manifest | None = None, book: EvidenceBook | None = None, **feed: Any
) -> Exporter:
    return Exporter(ExportFeed([endpoint], manifest=manifest, book=book, **feed), "127.0.0.1", 0).start()


def healthy_hello(manifest: Manifest) -> Hello:
    """Served with the layers and width the demo manifest was trained on."""
    h = hello()
    layers = list(manifest.concat_order)
    aux = dataclasses.replace(
        h.aux or AuxWiring(), declared_ids=layers, ids_read=layers, capture_canonical=layers,
        width=3 * manifest.slot_width, expected_width=3 * manifest.slot_width,
    )  # fmt: skip
    return dataclasses.replace(
        h, aux=aux, model=dataclasses.replace(h.model, hidden_size=manifest.slot_width)
    )


STEPS = 60


def test_metrics_agree_with_the_monitor_and_flag_the_miswired_source(
    pub: tuple[zmq.Socket, str], manifest: Manifest
) -> None:
    sock, endpoint = pub
    exp = start_exporter(endpoint, manifest)
    monitor = Feed([endpoint], manifest=manifest).start()  # the monitor's own view of the same stream
    try:
        bad, good = Source(sock, "gpu-a:11:r0"), Source(sock, "gpu-b:12:r1")

        def both_heard(key: str) -> Callable[[], bool]:
            return lambda: in_export(exp, key)() and monitor.snapshot().source(key) is not None

        for src, h in ((bad, hello()), (good, healthy_hello(manifest))):
            src.hello_until(both_heard(src.key), h)
        for i in range(STEPS):
            bad.send(STEP, step(i))
            good.send(STEP, step(1000 + i))
        bad.send(HEALTH, {"dropped": 7, "hook_errors": 2, "started": 1.0})
        url = exp.url

        def settled() -> bool:
            snap, s = monitor.snapshot(), scrape(url)
            keys = (bad.key, good.key)
            return (
                all(snap.source(k) is not None and snap.source(k).steps == STEPS for k in keys)
                and all(get(s, "eagle3_verify_steps_total", source=k) == STEPS for k in keys)
                and get(s, "eagle3_finding", source=bad.key, code="LAYER_MAP_MISMATCH") is not None
            )

        wait_for(settled, "both sources' steps and the findings")
        monitor.settle_findings()
        snap, s = monitor.snapshot(), scrape(url)
        for src, first in ((bad, 0), (good, 1000)):
            k = src.key
            summary = snap.source(k).summary
            # what the stream held, counted here independently: step(i) accepts rng(i)'s first draw
            acc = np.concatenate(
                [np.random.default_rng(i).integers(0, 3, 4) for i in range(first, first + STEPS)]
            )
            buckets = [value(s, "eagle3_accept_length_bucket", source=k, le=str(n)) for n in range(1, 5)]
            assert np.diff(buckets, prepend=0).tolist() == np.bincount(acc + 1, minlength=5)[1:].tolist()
            assert np.diff(buckets, prepend=0).tolist() == summary.histogram[1:].tolist()
            count = value(s, "eagle3_accept_length_count", source=k)
            assert count == acc.size == summary.request_steps
            mean = value(s, "eagle3_accept_length_sum", source=k) / count
            assert mean == pytest.approx(summary.mean_accept_length) == pytest.approx(acc.mean() + 1)
            assert value(s, "eagle3_accepted_tokens_total", source=k) == acc.sum()
            assert value(s, "eagle3_drafted_tokens_total", source=k) == acc.size * 3  # width 4: 3 positions
            per = {
                m: [value(s, f"eagle3_position_{m}_total", source=k, position=str(i)) for i in (1, 2, 3)]
                for m in ("proposed", "accepted", "reached")
            }
            uncond = np.divide(per["accepted"], per["proposed"])
            cond = np.divide(
                per["accepted"], per["reached"], out=np.zeros(3), where=np.array(per["reached"]) > 0
            )
            assert uncond == pytest.approx(summary.unconditional)
            assert cond == pytest.approx(summary.conditional)
            assert value(s, "eagle3_source_up", source=k) == 1.0
            assert value(s, "eagle3_last_event_age_seconds", source=k) < 5
        findings = {(dict(ls)["source"], dict(ls)["code"]) for n, ls in s if n == "eagle3_finding"}
        assert (bad.key, "LAYER_MAP_MISMATCH") in findings and (
            good.key,
            "LAYER_MAP_MISMATCH",
        ) not in findings
        assert value(s, "eagle3_finding", source=bad.key, code="LAYER_MAP_MISMATCH", severity="error") == 1
        assert value(s, "eagle3_tracer_dropped_events_total", source=bad.key) == 7
        assert value(s, "eagle3_tracer_hook_errors_total", source=bad.key) == 2
        info = {n: dict(ls) for n, ls in s if n == "eagle3_spec_info" and dict(ls)["source"] == bad.key}
        assert info["eagle3_spec_info"]["capture_canonical"] == "-1,3,4"
        assert info["eagle3_spec_info"]["num_draft_tokens"] == "4"
        assert info["eagle3_spec_info"]["algorithm"] == "EAGLE3"
    finally:
        monitor.stop()
        exp.close()


def counters(s: Samples) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {k: v for k, v in s.items() if k[0].endswith(("_total", "_bucket", "_count", "_sum"))}


def test_a_restarted_source_never_makes_a_counter_go_down(pub: tuple[zmq.Socket, str]) -> None:
    sock, endpoint = pub
    exp = start_exporter(endpoint)
    try:
        old = Source(sock, "box:7:r0", seq=1_000_000)  # far past the reordering window
        old.hello_until(in_export(exp, old.key))
        for i in range(30):
            old.send(STEP, step(i))
        old.send(HEALTH, {"dropped": 5, "hook_errors": 3, "started": 100.0})
        wait_for(
            lambda: get(scrape(exp.url), "eagle3_tracer_dropped_events_total", source=old.key) == 5,
            "phase 1",
        )
        before = counters(scrape(exp.url))
        seen = [before]
        errors: list[BaseException] = []
        stop = threading.Event()

        def keep_scraping() -> None:  # scrapes while the restart is folded in
            while not stop.is_set():
                try:
                    seen.append(counters(scrape(exp.url)))
                except BaseException as exc:  # noqa: BLE001 - reported by the test below
                    errors.append(exc)
                    return

        t = threading.Thread(target=keep_scraping)
        t.start()
        try:
            new = Source(sock, old.key, seq=0)  # the same host:pid:rank, counting from zero again
            new.send(HEALTH, {"dropped": 1, "hook_errors": 0, "started": 200.0})
            new.send(HELLO, hello().to_body())
            for i in range(10):
                new.send(STEP, step(100 + i))
            wait_for(
                lambda: (
                    value(scrape(exp.url), "eagle3_verify_steps_total", source=old.key) == 40
                    and value(scrape(exp.url), "eagle3_source_restarts_total", source=old.key) == 1
                ),
                "the restart",
            )
        finally:
            stop.set()
            t.join(10)
        assert not errors
        after = counters(scrape(exp.url))
        seen.append(after)
        for earlier, later in zip(seen, seen[1:], strict=False):
            for k, v in earlier.items():
                assert later.get(k, v) >= v, f"{k} went down: {v} -> {later.get(k)}"
        assert value(after, "eagle3_tracer_dropped_events_total", source=old.key) == 5 + 1
        assert value(after, "eagle3_tracer_hook_errors_total", source=old.key) == 3 + 0
    finally:
        exp.close()


def test_a_book_that_forgot_a_source_keeps_its_counters(pub: tuple[zmq.Socket, str]) -> None:
    """A book holding one source: a second one evicts the first, whose return starts from zero."""
    sock, endpoint = pub
    exp = start_exporter(endpoint, book=EvidenceBook(max_sources=1))
    try:
        a, b = Source(sock, "a:1:r0"), Source(sock, "b:2:r0")
        a.hello_until(in_export(exp, a.key))
        for i in range(20):
            a.send(STEP, step(i))
        wait_for(lambda: get(scrape(exp.url), "eagle3_verify_steps_total", source=a.key) == 20, "a's steps")
        first = value(scrape(exp.url), "eagle3_accept_length_count", source=a.key)
        b.send(HELLO, hello().to_body())
        wait_for(lambda: not in_export(exp, a.key)(), "a evicted")
        for i in range(5):
            a.send(STEP, step(50 + i))
        wait_for(lambda: in_export(exp, a.key)(), "a back")
        wait_for(
            lambda: [s.verify_steps for s in exp.feed.figures().sources if s.key == a.key] == [5], "a's 5"
        )
        s = scrape(exp.url)
        assert value(s, "eagle3_verify_steps_total", source=a.key) == 25
        assert value(s, "eagle3_accept_length_count", source=a.key) == first + 5 * 4
        # a had sent a hello and steps when b pushed it out; b had sent only a hello
        assert value(s, "eagle3_evicted_sources_total", kind="proven") == 1
        assert value(s, "eagle3_evicted_sources_total", kind="unproven") == 1
    finally:
        exp.close()


def test_the_lean_feed_folds_every_event_once_across_bounded_batches(pub: tuple[zmq.Socket, str]) -> None:
    """Receive batches of 16 frames and folds of at most 64: a burst of 600 steps from two sources of
    different batch widths spans dozens of each, and /metrics counts each step once; a hole in seq
    is counted as missed."""
    sock, endpoint = pub
    exp = start_exporter(endpoint, recv_batch=16, max_fold=64)
    try:
        a, b = Source(sock, "a:1:r0"), Source(sock, "b:2:r0")
        for src in (a, b):
            src.hello_until(in_export(exp, src.key))
        n = 300
        for i in range(n):
            a.send(STEP, step(i))
            b.send(STEP, step(5000 + i, batch=8, max_accept=4))
        wait_for(
            lambda: (
                [get(scrape(exp.url), "eagle3_verify_steps_total", source=k) for k in (a.key, b.key)]
                == [n, n]
            ),
            "every step of both sources",
        )
        s = scrape(exp.url)
        for src, first, batch, top in ((a, 0, 4, 3), (b, 5000, 8, 4)):
            k = src.key
            acc = np.concatenate(  # what the stream held, counted here
                [np.random.default_rng(i).integers(0, top, batch) for i in range(first, first + n)]
            )
            buckets = [
                value(s, "eagle3_accept_length_bucket", source=k, le=str(j)) for j in range(1, top + 1)
            ]
            assert (
                np.diff(buckets, prepend=0).tolist() == np.bincount(acc + 1, minlength=top + 1)[1:].tolist()
            )
            assert value(s, "eagle3_accept_length_count", source=k) == acc.size
            assert value(s, "eagle3_accept_length_sum", source=k) == acc.sum() + acc.size
            assert value(s, "eagle3_accepted_tokens_total", source=k) == acc.sum()
            assert value(s, "eagle3_drafted_tokens_total", source=k) == acc.size * 3
            assert value(s, "eagle3_missed_events_total", source=k) == 0
        assert exp.feed.batches > 2 * n // 64  # it did fold in bounded pieces
        # the exporter keeps no per-request figures: nothing of the requests is parked or folded
        assert all(
            st.requests.events == 0 and not st.requests.recent for st in exp.feed.book.sources.values()
        )
        a.seq += 5  # five events lost on the way
        a.send(STEP, step(n))
        wait_for(
            lambda: get(scrape(exp.url), "eagle3_verify_steps_total", source=a.key) == n + 1, "the step after"
        )
        assert value(scrape(exp.url), "eagle3_missed_events_total", source=a.key) == 5
    finally:
        exp.close()


def test_the_age_says_how_far_behind_the_fold_is(pub: tuple[zmq.Socket, str]) -> None:
    """A frame stamped 30 s before it is folded (as one that waited in a queue): the fold lag and the
    age say 30 s, while the source, heard just now, stays up; a fresh frame brings both back."""
    sock, endpoint = pub
    exp = start_exporter(endpoint)
    try:
        src = Source(sock, "late:4:r0")
        src.hello_until(in_export(exp, src.key))
        for i in range(5):
            src.send(STEP, step(i))
        wait_for(lambda: get(scrape(exp.url), "eagle3_verify_steps_total", source=src.key) == 5, "5 steps")
        s = scrape(exp.url)
        assert value(s, "eagle3_fold_lag_seconds", source=src.key) < 5
        assert value(s, "eagle3_last_event_age_seconds", source=src.key) < 5
        src.send(STEP, step(5), ts=time.time() - 30)
        wait_for(
            lambda: get(scrape(exp.url), "eagle3_verify_steps_total", source=src.key) == 6, "the late step"
        )
        s = scrape(exp.url)
        assert value(s, "eagle3_fold_lag_seconds", source=src.key) >= 29
        assert value(s, "eagle3_last_event_age_seconds", source=src.key) >= 29
        assert value(s, "eagle3_source_up", source=src.key) == 1  # late, not silent
        src.send(STEP, step(6))
        wait_for(
            lambda: get(scrape(exp.url), "eagle3_verify_steps_total", source=src.key) == 7, "a fresh step"
        )
        s = scrape(exp.url)
        assert value(s, "eagle3_fold_lag_seconds", source=src.key) < 5
        assert value(s, "eagle3_last_event_age_seconds", source=src.key) < 5
    finally:
        exp.close()


class HeldBook(EvidenceBook):
    """A book whose fold waits while ``open`` is clear: an exporter whose fold has fallen behind."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()

    def ingest(self, *args: Any, **kwargs: Any) -> Any:
        if not self.open.is_set():
            self.waiting.set()
            self.open.wait()
        return super().ingest(*args, **kwargs)


def test_a_fold_behind_drops_past_the_receive_bound_and_counts_every_event(
    pub: tuple[zmq.Socket, str],
) -> None:
    """The fold held while 20,000 steps arrive (~40 MB): at most the receive bound waits in the
    socket, the publisher's socket drops the rest. Once the fold goes on, every step sent is either
    folded or counted as dropped on the way, and the tracer is not blamed for any of them."""
    sock, endpoint = pub

    def bounded(eps: list[str]) -> Subscriber:
        sub = Subscriber([], rcvhwm=64)
        sub.socket.setsockopt(zmq.RCVBUF, 1 << 16)  # the kernel's buffer fixed: no autotuning to 32 MB
        for ep in eps:
            sub.add_endpoint(ep)
        return sub

    book = HeldBook()
    exp = start_exporter(endpoint, book=book, subscriber_factory=bounded)
    try:
        Source(sock, "join:1:r0").hello_until(in_export(exp, "join:1:r0"))
        flood = Source(sock, "flood:2:r0")
        body = step(0, batch=64)
        book.open.clear()
        flood.send(STEP, body)  # the first frame: received, its fold held
        wait_for(book.waiting.is_set, "the fold held")
        for _ in range(20_000):
            flood.send(STEP, body)
        book.open.set()

        def accounted() -> bool:
            """Every step sent so far is folded or counted missed: the last one was heard."""
            s = scrape(exp.url)
            folded = get(s, "eagle3_verify_steps_total", source=flood.key) or 0
            return folded + (get(s, "eagle3_missed_events_total", source=flood.key) or 0) == flood.seq

        while True:  # one step at a time until the exporter has heard the last one sent
            flood.send(STEP, body)
            with contextlib.suppress(AssertionError):
                wait_for(accounted, "the last step", timeout=3.0)
                break
            assert flood.seq < 20_200, "the exporter never folded again"
        s = scrape(exp.url)
        folded = value(s, "eagle3_verify_steps_total", source=flood.key)
        dropped = value(s, "eagle3_receive_dropped_events_total", source=flood.key)
        assert folded + dropped == flood.seq and dropped > 0
        assert value(s, "eagle3_missed_events_total", source=flood.key) == dropped  # none by the tracer
    finally:
        book.open.set()
        exp.close()


def test_the_receive_bound_holds_over_every_endpoint() -> None:
    """libzmq's mark is per connection: the bound is split over the endpoints, and follows them."""
    eps = [f"tcp://127.0.0.1:{port}" for port in range(1, 65)]  # nothing listens: they only connect
    sub = Subscriber(eps, rcvhwm=RCVHWM)
    try:
        assert sub.socket.getsockopt(zmq.RCVHWM) * 64 == RCVHWM
        for ep in eps[32:]:
            sub.remove_endpoint(ep)
        assert sub.socket.getsockopt(zmq.RCVHWM) * 32 == RCVHWM
        sub.add_endpoint("tcp://127.0.0.1:65")
        assert sub.socket.getsockopt(zmq.RCVHWM) == RCVHWM // 33
    finally:
        sub.close()


def test_the_fold_lag_is_not_taken_for_a_clock_offset_however_long_the_fold_stays_behind() -> None:
    """The lag learns the publisher's clock offset only from folds that emptied the socket: a fold
    behind for five minutes (every batch left frames waiting) reads its whole delay, not zero."""
    lag = FoldLag(window_s=60.0)
    offset = 0.4  # the publisher's clock runs 0.4 s behind ours
    for t in range(10):  # caught up: delay = the offset alone
        lag.fold({"s": t - offset}, t + 0.0, caught_up=True)
    assert lag.lag("s") == pytest.approx(0.0)
    behind = 0.0
    for t in range(10, 310):  # behind, and further behind by 0.5 s each second
        behind += 0.5
        lag.fold({"s": t - offset - behind}, float(t), caught_up=False)
    assert lag.lag("s") == pytest.approx(behind)  # 150 s behind, after five 60 s windows
    lag.fold({"s": 310 - offset}, 310.0, caught_up=True)  # caught up again
    assert lag.lag("s") == pytest.approx(0.0)


def test_restart_safe_holds_a_dip_and_carries_a_restart() -> None:
    c = RestartSafe()
    holder = EvidenceBook()  # any object: its identity is the epoch
    assert c.values(("s", "book"), np.array([5, 2]), holder, fall_is_restart=False).tolist() == [5, 2]
    # a hole in seq filled by a late frame: the count was right before, hold it
    assert c.values(("s", "book"), np.array([4, 3]), holder, fall_is_restart=False).tolist() == [5, 3]
    # a new holder starts over: the old figures become the offset
    assert c.values(("s", "book"), np.array([1, 1]), EvidenceBook(), fall_is_restart=False).tolist() == [6, 4]
    # a tracer's own counter falling back is a restart, even under the same start time
    assert c.values(("s", "health"), np.array([9]), 1.0, fall_is_restart=True).tolist() == [9]
    assert c.values(("s", "health"), np.array([2]), 1.0, fall_is_restart=True).tolist() == [11]
    assert c.values(("s", "health"), np.array([4]), 2.0, fall_is_restart=True).tolist() == [15]


# -- the command line -------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "export", *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("--prometheus", str(port), "tcp://127.0.0.1:5999")
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == f"eagle3-top export: port {port} on 127.0.0.1 is in use; choose another with --prometheus"
    )


def test_bad_endpoints_are_named_and_none_left_is_exit_2() -> None:
    r = run_cli("--prometheus", "0", "nonsense", "tcp://127.0.0.1:70000")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3 and "'nonsense'" in lines[0] and "70000" in lines[1]
    assert lines[2] == "eagle3-top export: no valid endpoint"


def test_a_host_other_machines_reach_needs_public() -> None:
    r = run_cli("--prometheus", "0", "--host", "0.0.0.0", "tcp://127.0.0.1:5999")
    assert r.returncode == 2 and "--public" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@contextlib.contextmanager
def export_process(*args: str) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """The command as a user runs it; yields it, its /metrics URL and the stderr lines before it."""
    # SIGINT ignored, as a shell starts a background job: the command must still stop on Ctrl-C
    proc = subprocess.Popen(
        [*CLI, "export", "--prometheus", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert proc.stderr is not None
        before: list[str] = []
        while not (line := proc.stderr.readline()).startswith("eagle3-top export: serving"):
            assert line, f"export ended: {before}"
            before.append(line)
        m = re.search(r"serving (http://127\.0\.0\.1:\d+/metrics)", line)
        assert m, line
        yield proc, m.group(1), before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_serves_a_publisher_and_stops_on_sigterm(
    pub: tuple[zmq.Socket, str], tmp_path: Path
) -> None:
    sock, endpoint = pub
    listed = tmp_path / "endpoints.txt"
    listed.write_text(f"# the fleet\n{endpoint}\n")
    with export_process("not-an-endpoint", "--endpoints-file", str(listed)) as (proc, url, before):
        assert len(before) == 1 and "'not-an-endpoint'" in before[0] and "(skipped)" in before[0]
        src = Source(sock, "svc:3:r0")
        src.hello_until(lambda: get(scrape(url), "eagle3_spec_info", source=src.key) is not None)
        for i in range(12):
            src.send(STEP, step(i))
        wait_for(lambda: get(scrape(url), "eagle3_verify_steps_total", source=src.key) == 12, "12 steps")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def test_the_command_subscribes_with_curve_keys(tmp_path: Path) -> None:
    server_key, server_secret = curve.generate(str(tmp_path / "server"), "server")
    _, client_secret = curve.generate(str(tmp_path / "clients"), "exporter")
    config = curve.server_config(server_secret, str(tmp_path / "clients"))
    publisher = Publisher(
        "tcp://127.0.0.1:0", SourceId("gpu", 9, 0, "test"), curve=config, hello_interval_s=0.2
    )
    publisher.set_hello(hello())
    try:
        keys = ["--curve-server-key", server_key, "--curve-client-secret", client_secret]
        with export_process(*keys, publisher.bound_endpoint) as (proc, url, _):
            wait_for(lambda: get(scrape(url), "eagle3_spec_info", source="gpu:9:r0") is not None, "the hello")
            for i in range(8):
                publisher.publish(STEP, step(i))
            wait_for(lambda: get(scrape(url), "eagle3_verify_steps_total", source="gpu:9:r0") == 8, "8 steps")
            proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop too
            assert proc.wait(15) == 0
    finally:
        publisher.close()
    half = run_cli("--prometheus", "0", "--curve-server-key", server_key, "tcp://127.0.0.1:5999")
    assert half.returncode == 2 and "CURVE needs both" in half.stderr


# -- the docs: alert rules and dashboard use only exported names ----------------------------------

METRIC = re.compile(r"\beagle3_[a-z0-9_]+")


def exported_names(pub: tuple[zmq.Socket, str], manifest: Manifest) -> set[str]:
    """Every sample name of a scrape that has all of them: a mis-wired source with health."""
    sock, endpoint = pub
    exp = start_exporter(endpoint, manifest)
    try:
        src = Source(sock, "n:1:r0")
        src.hello_until(in_export(exp, src.key))
        for i in range(5):
            src.send(STEP, step(i))
        src.send(HEALTH, {"dropped": 0, "hook_errors": 0, "started": 1.0})
        wait_for(lambda: "eagle3_finding" in {n for n, _ in scrape(exp.url)}, "findings")
        wait_for(lambda: "eagle3_tracer_dropped_events_total" in {n for n, _ in scrape(exp.url)}, "health")
        return {n for n, _ in scrape(exp.url)}
    finally:
        exp.close()


def exprs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "query") and isinstance(v, str):
                yield v
            else:
                yield from exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from exprs(v)


def test_alert_rules_and_dashboard_name_only_exported_metrics(
    pub: tuple[zmq.Socket, str], manifest: Manifest
) -> None:
    names = exported_names(pub, manifest)
    rules = yaml.safe_load((ROOT / "docs" / "eagle3-top-alerts.yml").read_text())
    dashboard = json.loads((ROOT / "docs" / "grafana-eagle3-top.json").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert "LAYER_MAP_MISMATCH" in " ".join(alerts.values())
    panel_exprs = list(exprs(dashboard["panels"]))
    assert len(panel_exprs) >= 6
    used = {m for e in [*alerts.values(), *exprs(dashboard)] for m in METRIC.findall(e)}
    assert used and used <= names, f"not exported: {sorted(used - names)}"
    # the datasource is a variable: the dashboard imports into any Grafana
    assert any(v["type"] == "datasource" for v in dashboard["templating"]["list"])
    for p in dashboard["panels"]:
        if "targets" in p:
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
