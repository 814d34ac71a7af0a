"""The sender in a sidecar process: a real ``RingPublisher``, its real sidecar, a real subscriber on
loopback. The stream must be the one the in-process sender sends, losses must show as holes, and
the sidecar must end with its server however the server ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import zmq
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import Event, Hello, SourceId
from eagle3_top.tracer.serving.publisher import EndpointError, MemoryPublisher
from eagle3_top.tracer.serving.ring_publisher import RingPublisher
from eagle3_top.tracer.serving.tracer import Tracer

from tests.conftest import PATIENCE_S, collect, poll_until


@pytest.fixture
def ring_pub() -> Iterator[RingPublisher]:
    pub = RingPublisher("tcp://127.0.0.1:0", SourceId("box", 4242, 0, "test"), hello_interval_s=0.5)
    yield pub
    pub.close()


def _joined(pub: RingPublisher) -> Subscriber:
    """A subscriber that has heard the hello: what is published from now on reaches it."""
    pub.set_hello(Hello(engine="test"))
    sub = Subscriber([pub.bound_endpoint])
    collect(sub, lambda got: any(e.kind == "hello" for e in got))
    return sub


def _steps(tracer: Tracer, count: int, seed: int) -> int:
    """Publish ``count`` random steps; returns how many had rows left to publish."""
    g = torch.Generator().manual_seed(seed)
    published = 0
    for i in range(count):
        bs, n = 1 + i % 9, 4
        step = tracer.make_step(
            [f"req-{seed}-{j}" for j in range(bs)],
            torch.randint(5, 128_000, (bs * n,), generator=g),
            torch.randint(1, n + 1, (bs,), generator=g, dtype=torch.int32),
            torch.randint(5, 128_000, (bs * n,), generator=g),
        )
        assert step is not None
        if i % 5 == 4:
            step.discard([j == 0 for j in range(bs)])
        published += step.rows > 0
        tracer.publish_step(step)
    return published


def _of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]


def test_the_sidecar_sends_the_stream_the_in_process_sender_would(ring_pub: RingPublisher) -> None:
    sub = _joined(ring_pub)
    traced, reference = Tracer(ring_pub), Tracer(MemoryPublisher())
    for t in (traced, reference):
        _steps(t, 40, seed=1)
        t.record_aux(torch.randn(96, 3 * 64, generator=torch.Generator().manual_seed(2)) * 0.7 + 0.1)
    ring_pub.count_hook_error(ValueError("a hook failed"))
    ring_pub.paused = True
    got = collect(
        sub,
        lambda got: (
            len(_of(got, "aux")) == 1
            and any(e.body.get("paused") and e.body.get("hook_errors") == 1 for e in _of(got, "health"))
        ),
    )
    steps = _of(got, "step")
    assert [e.body for e in steps] == reference.publisher.bodies("step")  # type: ignore[union-attr]
    assert _of(got, "aux")[0].body == reference.publisher.bodies("aux")[0]  # type: ignore[union-attr]
    assert np.frombuffer(steps[-1].body["draft"], "<i4").std() > 0
    health = [e.body for e in _of(got, "health")][-1]
    assert health["discarded_rows"] == 8 and health["last_error"] == "ValueError: a hook failed"
    assert health["started"] == ring_pub.started and health["endpoint"] == ring_pub.bound_endpoint
    counters = sub.sources[SourceId("box", 4242, 0, "test").key]
    assert counters.missed == 0 and sub.malformed == 0
    sub.close()


def test_a_full_ring_drops_steps_and_the_reader_counts_the_holes() -> None:
    pub = RingPublisher("tcp://127.0.0.1:0", SourceId("box", 7, 0, "test"), ring_bytes=256 * 1024)
    try:
        sub = _joined(pub)
        # the reader takes the tracer's drop count from the first health it hears as its baseline
        collect(sub, lambda got: any(e.body["dropped"] == 0 for e in _of(got, "health")))
        tracer = Tracer(pub)
        published = 0
        os.kill(pub._proc.pid, signal.SIGSTOP)  # a sidecar that has fallen behind
        try:
            while pub.dropped < 25:
                published += _steps(tracer, 10, seed=3)
        finally:
            os.kill(pub._proc.pid, signal.SIGCONT)
        dropped = pub.dropped
        poll_until(lambda: pub.ring.pending_bytes() == 0, "the sidecar to catch up")
        published += _steps(tracer, 1, seed=4)  # it carries the count of the steps lost before it
        last = tracer.steps - 1
        got = collect(
            sub,
            lambda got: (
                any(e.body["step"] == last for e in _of(got, "step"))
                and any(e.body["dropped"] == dropped for e in _of(got, "health"))
            ),
        )
        counters = sub.sources[SourceId("box", 7, 0, "test").key]
        assert counters.missed == dropped  # each dropped step is a hole in seq
        assert counters.publisher_dropped == dropped  # and health says the tracer dropped them
        assert len(_of(got, "step")) == published - dropped
        sub.close()
    finally:
        pub.close()


CHILD = textwrap.dedent(
    """
    import os, signal, sys, torch
    from eagle3_top.tracer.schema import Hello, SourceId
    from eagle3_top.tracer.serving.ring_publisher import RingPublisher
    from eagle3_top.tracer.serving.tracer import Tracer
    pub = RingPublisher("tcp://127.0.0.1:0", SourceId("box", 99, 0, "test"), hello_interval_s=0.5)
    pub.set_hello(Hello(engine="test"))
    print(pub.bound_endpoint, pub._proc.pid, flush=True)
    sys.stdin.readline()
    tracer = Tracer(pub)
    g = torch.Generator().manual_seed(5)
    for i in range(24):  # three whole batches: every step is in the ring before the kill
        tracer.publish_step(tracer.make_step(["a", "b"], torch.randint(5, 900, (8,), generator=g),
                            torch.tensor([2, 3], dtype=torch.int32), torch.randint(5, 900, (8,), generator=g)))
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no atexit: a server killed outright
    """
)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # a zombie nobody reaps has ended too
    except FileNotFoundError:
        return True


def test_the_sidecar_publishes_what_was_written_and_ends_when_its_server_is_killed() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdin is not None
    endpoint, sidecar = child.stdout.readline().split()
    sub = Subscriber([endpoint])
    collect(sub, lambda got: any(e.kind == "hello" for e in got))
    child.stdin.write("go\n")
    child.stdin.flush()
    got = collect(sub, lambda got: any(e.body.get("final") for e in _of(got, "health")))
    assert child.wait(PATIENCE_S) == -signal.SIGKILL
    assert len(_of(got, "step")) == 24  # written before the kill, published after it
    assert _of(got, "health")[-1].body["final"] is True
    poll_until(lambda: _gone(int(sidecar)), "the sidecar to end with its server")
    sub.close()


def test_an_endpoint_in_use_is_one_line_in_the_caller() -> None:
    taken = zmq.Context.instance().socket(zmq.PUB)
    taken.setsockopt(zmq.LINGER, 0)
    taken.bind("tcp://127.0.0.1:0")
    endpoint = taken.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        with pytest.raises(EndpointError, match="cannot bind") as err:
            RingPublisher(endpoint, SourceId.local(engine="test"))
        assert "\n" not in str(err.value) and "in use" in str(err.value)
    finally:
        taken.close()


def test_a_remote_bind_is_refused_before_any_process_starts() -> None:
    with pytest.raises(EndpointError, match="not a loopback address"):
        RingPublisher("tcp://0.0.0.0:5557", SourceId.local(engine="test"))


def test_an_engine_failure_is_sent_before_flush_returns(ring_pub: RingPublisher) -> None:
    sub = _joined(ring_pub)
    ring_pub.engine_failed("verify raised RuntimeError: CUDA error: an illegal memory access")
    assert ring_pub.flush(PATIENCE_S)
    got = sub.poll(0) + collect(sub, lambda got: bool(got), timeout=PATIENCE_S)
    errors = [e.body.get("engine_error") for e in _of(got, "health")]
    assert "verify raised RuntimeError: CUDA error: an illegal memory access" in errors
    sub.close()
