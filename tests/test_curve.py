"""Remote tailing over CURVE: encrypted, and only authorised subscribers get the stream."""

from __future__ import annotations

import time

import zmq
from conftest import collect
from eagle3_top.tracer import curve
from eagle3_top.tracer.publisher import Publisher
from eagle3_top.tracer.schema import STEP, Hello, SourceId
from eagle3_top.tracer.subscriber import Subscriber


def test_only_authorised_clients_receive(tmp_path) -> None:
    server_pub, server_sec = curve.generate(str(tmp_path / "server"), "server")
    _, alice_sec = curve.generate(str(tmp_path / "clients"), "alice")
    _, mallory_sec = curve.generate(str(tmp_path / "others"), "mallory")
    _, secret = curve.load_secret(server_sec)
    pub = Publisher(
        "tcp://127.0.0.1:0",
        SourceId.local(),
        curve_secret_key=secret,
        curve_clients_dir=str(tmp_path / "clients"),
        hello_interval_s=0.2,
    )
    alice = Subscriber([pub.bound_endpoint], curve=curve.client(server_pub, alice_sec))
    mallory = Subscriber([pub.bound_endpoint], curve=curve.client(server_pub, mallory_sec))
    plain = Subscriber([pub.bound_endpoint])
    try:
        pub.set_hello(Hello(engine="test"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(e.kind == STEP for e in alice.poll(50)):
            pub.publish(STEP, {"step": 0})
        got_alice = collect(alice, lambda got: len(got) >= 3, timeout=3)
        assert got_alice, "the authorised client received nothing"
        for _ in range(20):
            pub.publish(STEP, {"step": 1})
        time.sleep(0.5)
        assert mallory.poll(100) == [] and plain.poll(100) == []
        assert (
            "auth" in mallory.endpoints[pub.bound_endpoint]
            or mallory.endpoints[pub.bound_endpoint] != "connected"
        )
    finally:
        for s in (alice, mallory, plain):
            s.close()
        pub.close()


def test_bad_key_files_are_one_line(tmp_path) -> None:
    (tmp_path / "x.key").write_text("not a certificate")
    for path in (str(tmp_path / "x.key"), str(tmp_path / "missing.key")):
        try:
            curve.load_secret(path)
        except curve.KeyError_ as exc:
            assert "\n" not in str(exc) and path in str(exc)
        else:
            raise AssertionError("accepted a bad key file")
    assert zmq.has("curve")
