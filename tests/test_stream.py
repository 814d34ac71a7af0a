"""Publisher and subscriber over a real loopback socket, with real msgpack bytes."""

from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest
import zmq
from conftest import PATIENCE_S, collect, wait_connected
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import (
    HEALTH,
    HELLO,
    STEP,
    DecodeError,
    Hello,
    SourceId,
    decode,
    step_body,
    step_view,
)
from eagle3_top.tracer.serving.publisher import EndpointError, Publisher, check_bind_endpoint

RNG = np.random.default_rng(7)


def _step(i: int, batch: int = 8, n: int = 4) -> tuple[dict, np.ndarray]:
    accepted = RNG.integers(0, n, batch).astype(np.int32)
    draft = RNG.integers(1, 256, (batch, n))
    tokens = RNG.integers(1, 256, int(accepted.sum()) + batch)
    return step_body(
        step=i,
        rids=[f"req-{i}-{j}" for j in range(batch)],
        draft=draft,
        accept_lens=accepted + 1,
        tokens=tokens,
    ), accepted


def test_steps_arrive_in_order_without_gaps(publisher: Publisher) -> None:
    sub = Subscriber([publisher.bound_endpoint])
    wait_connected(sub)
    publisher.set_hello(Hello(engine="test"))
    sent = []
    for i in range(300):
        body, accepted = _step(i)
        sent.append(accepted)
        assert publisher.publish(STEP, body)
    events = collect(sub, lambda got: sum(e.kind == STEP for e in got) >= 300)
    steps = [e for e in events if e.kind == STEP]
    assert len(steps) == 300
    assert [e.body["step"] for e in steps] == list(range(300))
    for ev, accepted in zip(steps, sent, strict=True):
        np.testing.assert_array_equal(step_view(ev).accepted, accepted)
    assert sub.sources[publisher.src].missed == 0
    assert any(e.kind == HELLO for e in events)
    sub.close()


def test_full_queue_drops_and_counts_without_blocking() -> None:
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(), queue_size=4)
    body, _ = _step(0)
    # Stall the sender: hold the queue full by publishing faster than a thread switch.
    results = [pub.publish(STEP, body) for _ in range(20000)]
    pub.close()
    # every call returned (a blocking publish with no subscriber would never have), and said which
    # frames it dropped
    assert not all(results)
    assert pub.dropped == results.count(False) > 0


def test_dropped_events_show_as_missed(publisher: Publisher) -> None:
    sub = Subscriber([publisher.bound_endpoint])
    wait_connected(sub)
    publisher.publish(STEP, _step(0)[0])
    collect(sub, lambda got: len(got) >= 1)  # the subscriber has seen where the stream starts
    publisher.queue_size = 0  # everything from here is dropped at the queue
    for i in range(1, 6):
        publisher.publish(STEP, _step(i)[0])
    publisher.queue_size = 4096
    publisher.publish(STEP, _step(6)[0])
    events = collect(sub, lambda got: sum(e.kind == STEP for e in got) >= 1)
    assert [e.body["step"] for e in events if e.kind == STEP] == [6]
    assert sub.sources[publisher.src].missed >= 5
    sub.close()


def test_health_reports_drops(publisher: Publisher) -> None:
    sub = Subscriber([publisher.bound_endpoint])
    wait_connected(sub)
    publisher.queue_size = 0
    publisher.publish(STEP, _step(0)[0])
    publisher.queue_size = 4096
    events = collect(sub, lambda got: any(e.kind == HEALTH and e.body["dropped"] for e in got))
    health = [e for e in events if e.kind == HEALTH][-1]
    assert health.body["dropped"] == 1
    assert health.body["queue_max"] == 4096
    sub.close()


@pytest.mark.parametrize(
    "frame, reason",
    [
        (b"\xc1\xc1garbage", "not msgpack"),
        (msgpack.packb([1, 2, 3]), "not a map"),
        (msgpack.packb({"v": 99, "kind": "step"}), "schema version"),
        (msgpack.packb({"v": 1, "src": "a", "seq": 0, "ts": 1.0}), "kind"),
        (msgpack.packb({"v": 1, "kind": "step", "src": "a", "seq": "x", "ts": 1.0}), "seq"),
    ],
)
def test_decode_rejects_with_one_line(frame: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        decode(frame)
    assert reason in str(err.value)
    assert "\n" not in str(err.value)


def test_step_columns_are_validated() -> None:
    body, _ = _step(0)
    body["accepted"] = body["accepted"][:-4]
    frame = msgpack.packb({"v": 1, "kind": STEP, "src": "x:1:r0", "seq": 0, "ts": 1.0, **body})
    with pytest.raises(DecodeError, match="accepted"):
        step_view(decode(frame))


def test_hostile_frames_are_counted_not_raised(raw_pub: tuple[zmq.Socket, str]) -> None:
    sock, endpoint = raw_pub
    sub = Subscriber([endpoint])
    wait_connected(sub)
    good = msgpack.packb({"v": 1, "kind": "step", "src": "h:1:r0", "seq": 0, "ts": 1.0, **_step(0)[0]})
    unknown = msgpack.packb({"v": 1, "kind": "future-kind", "src": "h:1:r0", "seq": 1, "ts": 1.0, "x": 1})
    for frame in [b"", b"\xff" * 100, msgpack.packb("str"), unknown, good]:
        sock.send(frame)
    events = collect(sub, lambda got: len(got) >= 1)
    time.sleep(0.1)
    events += sub.poll(50)
    assert [e.kind for e in events] == ["step"]
    assert sub.malformed == 3
    assert sub.unknown_kinds == 1
    assert sub.last_malformed
    sub.close()


def test_endpoint_down_then_back() -> None:
    ctx = zmq.Context.instance()
    probe = ctx.socket(zmq.PUB)
    probe.bind("tcp://127.0.0.1:0")
    endpoint = probe.getsockopt_string(zmq.LAST_ENDPOINT)
    probe.close(0)
    sub = Subscriber([endpoint])
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline and "down" not in sub.endpoints[endpoint]:
        sub.poll(50)
    assert "down" in sub.endpoints[endpoint]
    pub = Publisher(endpoint, SourceId.local())
    try:
        wait_connected(sub)
        pub.publish(STEP, _step(0)[0])
        assert collect(sub, lambda got: len(got) >= 1)
    finally:
        pub.close()
        sub.close()


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:5557", "tcp://*:5557", "tcp://10.1.2.3:5557"])
def test_publisher_refuses_non_loopback_by_default(endpoint: str) -> None:
    with pytest.raises(EndpointError, match="loopback"):
        check_bind_endpoint(endpoint)
    check_bind_endpoint(endpoint, allow_remote=True)


def test_loopback_and_ipc_are_allowed() -> None:
    for ep in ["tcp://127.0.0.1:5557", "tcp://localhost:1", "tcp://[::1]:5557", "ipc:///tmp/x"]:
        check_bind_endpoint(ep)
