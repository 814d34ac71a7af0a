"""Remote tailing over CURVE: encrypted, only authorised subscribers get the stream, and every half
configuration is refused instead of serving plain text or admitting anyone."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest
import zmq
from conftest import PATIENCE_S, collect
from eagle3_top.hooks import toy_main
from eagle3_top.hooks.sglang import plugin
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import STEP, Hello, SourceId
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tracer.transport import curve

NOT_ADMITTED = "refused by the server (CURVE: key not admitted)"


@pytest.fixture
def keys(tmp_path) -> dict[str, str]:
    server_pub, server_sec = curve.generate(str(tmp_path / "server"), "server")
    _, alice_sec = curve.generate(str(tmp_path / "clients"), "alice")
    mallory_pub, mallory_sec = curve.generate(str(tmp_path / "others"), "mallory")
    return {
        "server": server_pub,
        "server_secret": server_sec,
        "clients": str(tmp_path / "clients"),
        "alice": alice_sec,
        "mallory": mallory_sec,
        "mallory_public": mallory_pub,
    }


@pytest.fixture
def closing() -> Iterator[Callable[[Subscriber], Subscriber]]:
    subs: list[Subscriber] = []
    yield lambda s: subs.append(s) or s
    for s in subs:
        s.close()


def wait_for(
    cond: Callable[[], bool], subs: tuple[Subscriber, ...] = (), timeout: float = PATIENCE_S
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in subs:
            s.poll(10)  # drains the monitor
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def receives(pub: Publisher, sub: Subscriber) -> bool:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        pub.publish(STEP, {"step": 0})
        if any(e.kind == STEP for e in sub.poll(50)):
            return True
    return False


def test_only_authorised_clients_receive(keys, closing) -> None:
    config = curve.server_config(keys["server_secret"], keys["clients"])
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(), curve=config, hello_interval_s=0.2)
    try:
        alice = closing(Subscriber([pub.bound_endpoint], curve=curve.client(keys["server"], keys["alice"])))
        mallory = closing(
            Subscriber([pub.bound_endpoint], curve=curve.client(keys["server"], keys["mallory"]))
        )
        plain = closing(Subscriber([pub.bound_endpoint]))
        pub.set_hello(Hello(engine="test"))
        assert receives(pub, alice), "the authorised client received nothing"
        assert collect(alice, lambda got: len(got) >= 3)
        for _ in range(20):
            pub.publish(STEP, {"step": 1})
        time.sleep(0.5)
        assert mallory.poll(100) == [] and plain.poll(100) == []
        assert alice.endpoints[pub.bound_endpoint] == "connected"
    finally:
        pub.close()


def test_subscriber_says_refused_and_keeps_saying_it(keys, closing) -> None:
    """The refusal outlives the disconnect that follows it; a plain-text client learns the server
    wants CURVE; a CURVE client of a plain-text server, that the server is not encrypted."""
    config = curve.server_config(keys["server_secret"], keys["clients"])
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(), curve=config)
    open_pub = Publisher("tcp://127.0.0.1:0", SourceId.local())
    try:
        ep, open_ep = pub.bound_endpoint, open_pub.bound_endpoint
        mallory = closing(Subscriber([ep], curve=curve.client(keys["server"], keys["mallory"])))
        plain = closing(Subscriber([ep]))
        alice = closing(Subscriber([open_ep], curve=curve.client(keys["server"], keys["alice"])))
        subs = (mallory, plain, alice)
        assert wait_for(lambda: mallory.endpoints[ep] == NOT_ADMITTED, subs), mallory.endpoints
        assert wait_for(
            lambda: plain.endpoints[ep].startswith("refused by the server (CURVE: it needs"), subs
        )
        assert wait_for(
            lambda: alice.endpoints[open_ep] == "refused by the server (CURVE: it publishes plain text)", subs
        )
        wait_for(lambda: False, subs, timeout=1.0)  # a retry cycle's worth of monitor events
        assert mallory.endpoints[ep] == NOT_ADMITTED
        assert plain.endpoints[ep].startswith("refused by the server")
    finally:
        pub.close()
        open_pub.close()


def test_refused_client_is_logged_once(keys, closing, caplog) -> None:
    config = curve.server_config(keys["server_secret"], keys["clients"])
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(), curve=config)
    mallory = curve.client(keys["server"], keys["mallory"])
    try:
        with caplog.at_level(logging.WARNING, logger="eagle3_top"):
            # libzmq does not retry a refused handshake: each attempt is a subscriber of its own
            for _ in range(8):
                closing(Subscriber([pub.bound_endpoint], curve=mallory))
            closing(Subscriber([pub.bound_endpoint]))
            closing(Subscriber([pub.bound_endpoint]))
            assert wait_for(lambda: pub.curve_refused >= 10), pub.curve_refused
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        mallory_key = curve.load_public(keys["mallory_public"]).decode()
        keyed = [line for line in lines if mallory_key in line]
        assert len(keyed) == 1 and "not among the certificates" in keyed[0] and pub.bound_endpoint in keyed[0]
        assert len([line for line in lines if "does not use CURVE" in line]) == 1, lines
        assert len(lines) == 2, lines
    finally:
        pub.close()


def test_refusal_log_is_bounded(keys, caplog) -> None:
    config = curve.server_config(keys["server_secret"], keys["clients"])
    assert config is not None
    admission = curve.Admission(config, "tcp://test", max_logged=3)
    with caplog.at_level(logging.WARNING, logger="eagle3_top"):
        for key in [zmq.curve_keypair()[0] for _ in range(30)]:
            assert not admission.callback(admission.domain, key)
            assert not admission.callback(admission.domain, key)  # a retry, from a logged key or not
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and "further ones are counted, not logged" in lines[-1], lines
    assert admission.refused == 60 and admission.refused_clients == 3 and admission.unlogged == 54


def test_any_client_is_explicit_and_publishers_keep_their_own_clients(keys, closing) -> None:
    """``--curve-any-client`` admits an unknown key; a publisher beside it, in the same process and
    ZeroMQ context, still refuses that key."""
    anyone = curve.server_config(keys["server_secret"], None, any_client=True)
    assert anyone is not None and anyone.admitted is None
    strict = curve.server_config(keys["server_secret"], keys["clients"])
    pub_any = Publisher("tcp://127.0.0.1:0", SourceId.local(), curve=anyone)
    pub_strict = Publisher("tcp://127.0.0.1:0", SourceId.local(), curve=strict)
    try:
        mallory = curve.client(keys["server"], keys["mallory"])
        on_any = closing(Subscriber([pub_any.bound_endpoint], curve=mallory))
        on_strict = closing(Subscriber([pub_strict.bound_endpoint], curve=mallory))
        plain = closing(Subscriber([pub_any.bound_endpoint]))
        assert receives(pub_any, on_any)
        assert wait_for(lambda: on_strict.endpoints[pub_strict.bound_endpoint] == NOT_ADMITTED, (on_strict,))
        assert wait_for(lambda: plain.endpoints[pub_any.bound_endpoint].startswith("refused"), (plain,))
        assert pub_any.curve_refused >= 1 and pub_strict.curve_refused >= 1
    finally:
        pub_any.close()
        pub_strict.close()


@pytest.mark.parametrize(
    "secret,clients,any_client,says",
    [
        (
            False,
            True,
            False,
            "--curve-clients needs --curve-secret: without it the stream would be plain text",
        ),
        (False, False, True, "--curve-any-client needs --curve-secret"),
        (True, False, False, "--curve-secret needs --curve-clients"),
        (True, True, True, "--curve-any-client contradicts --curve-clients"),
        (True, "empty", False, "no client certificate (*.key) in it"),
        (True, "missing", False, "no such directory of client certificates"),
    ],
)
def test_half_configurations_are_refused(keys, tmp_path, secret, clients, any_client, says) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "server.key_secret").write_text("only secrets here")
    dirs = {
        True: keys["clients"],
        False: None,
        "empty": str(tmp_path / "empty"),
        "missing": str(tmp_path / "nope"),
    }
    with pytest.raises(curve.KeyError_) as err:
        curve.server_config(keys["server_secret"] if secret else None, dirs[clients], any_client)
    assert says in str(err.value) and "\n" not in str(err.value)
    if secret is True and clients is False and any_client is False:
        assert "--curve-any-client" in str(err.value)  # it names the switch that admits anyone
    assert curve.server_config(None, None) is None


def test_toy_refuses_half_configuration_before_loading_the_engine(keys, tmp_path, capsys) -> None:
    missing_model = str(tmp_path / "no-model")  # the engine would fail on it, later, differently
    base = ["--publish", "tcp://127.0.0.1:0", "--model-path", missing_model]
    for flags, says in (
        (["--curve-clients", keys["clients"]], "--curve-clients needs --curve-secret"),
        (["--curve-secret", keys["server_secret"]], "--curve-secret needs --curve-clients"),
        (
            [
                "--curve-secret",
                keys["server_secret"],
                "--curve-clients",
                keys["clients"],
                "--curve-any-client",
            ],
            "contradicts",
        ),
    ):
        assert toy_main.main(base + flags) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("eagle3-top toy: ") and says in err and "\n" not in err, err


def test_plugin_refuses_half_configuration_without_publishing(keys, monkeypatch, caplog) -> None:
    monkeypatch.setenv(plugin.ENV_PUBLISH, "tcp://127.0.0.1:0")
    monkeypatch.setenv(plugin.ENV_CURVE_CLIENTS, keys["clients"])
    monkeypatch.delenv(plugin.ENV_CURVE_SECRET, raising=False)
    monkeypatch.delenv("EAGLE3_TOP_CURVE_ANY_CLIENT", raising=False)
    plugin._reset_for_tests()
    try:
        with caplog.at_level(logging.WARNING, logger="eagle3_top"):
            assert plugin.tracer_for_worker(object()) is None
            assert plugin.tracer_for_worker(object()) is None
        assert plugin._state["publisher"] is None
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [
            "eagle3-top: not publishing: EAGLE3_TOP_CURVE_CLIENTS needs EAGLE3_TOP_CURVE_SECRET: "
            "without it the stream would be plain text; tracer off, the server is unaffected"
        ], lines
    finally:
        plugin._reset_for_tests()


def test_plugin_environment(keys, monkeypatch) -> None:
    for name in (plugin.ENV_CURVE_SECRET, plugin.ENV_CURVE_CLIENTS, "EAGLE3_TOP_CURVE_ANY_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    assert plugin.curve_from_env() is None
    monkeypatch.setenv(plugin.ENV_CURVE_SECRET, keys["server_secret"])
    with pytest.raises(curve.KeyError_, match="EAGLE3_TOP_CURVE_ANY_CLIENT=1"):
        plugin.curve_from_env()
    monkeypatch.setenv("EAGLE3_TOP_CURVE_ANY_CLIENT", "1")
    config = plugin.curve_from_env()
    assert config is not None and config.admitted is None
    monkeypatch.setenv(plugin.ENV_CURVE_CLIENTS, keys["clients"])
    with pytest.raises(curve.KeyError_, match="contradicts EAGLE3_TOP_CURVE_CLIENTS"):
        plugin.curve_from_env()
    monkeypatch.delenv("EAGLE3_TOP_CURVE_ANY_CLIENT")
    config = plugin.curve_from_env()
    assert config is not None and config.admitted is not None and len(config.admitted) == 1


def test_bad_key_files_are_one_line(tmp_path) -> None:
    (tmp_path / "x.key").write_text("not a certificate")
    (tmp_path / "short.key").write_text('public-key = "abc"\n')
    for path in (str(tmp_path / "x.key"), str(tmp_path / "missing.key"), str(tmp_path / "short.key")):
        try:
            curve.load_secret(path)
        except curve.KeyError_ as exc:
            assert "\n" not in str(exc) and path in str(exc)
        else:
            raise AssertionError("accepted a bad key file")
    assert zmq.has("curve")


def test_client_keys_from_the_environment(keys, closing, monkeypatch) -> None:
    """The client flags' environment twins (named like the plugin's) let a fleet's keys be set once."""
    import argparse

    from eagle3_top.tracer.transport import curve_flags as curve_args

    p = argparse.ArgumentParser()
    curve_args.add_client_arguments(p)
    pub = Publisher(
        "tcp://127.0.0.1:0",
        SourceId.local(),
        curve=curve.server_config(keys["server_secret"], keys["clients"]),
    )
    try:
        monkeypatch.setenv(curve_args.ENV_SERVER_KEY, keys["server"])
        monkeypatch.setenv(curve_args.ENV_CLIENT_SECRET, keys["alice"])
        client = curve_args.client_from(p.parse_args([]))
        assert client is not None
        assert receives(pub, closing(Subscriber([pub.bound_endpoint], curve=client)))
        # a flag wins over its twin: mallory's key is refused although alice's is in the environment
        flagged = curve_args.client_from(p.parse_args(["--curve-client-secret", keys["mallory"]]))
        sub = closing(Subscriber([pub.bound_endpoint], curve=flagged))
        assert wait_for(lambda: sub.endpoints[pub.bound_endpoint] == NOT_ADMITTED, (sub,))
        monkeypatch.delenv(curve_args.ENV_CLIENT_SECRET)
        with pytest.raises(curve.KeyError_, match="EAGLE3_TOP_CURVE_CLIENT_SECRET"):
            curve_args.client_from(p.parse_args([]))
    finally:
        pub.close()


def test_server_flags_fall_back_on_the_plugins_variables(keys, monkeypatch) -> None:
    """`toy` and `relay` read the same variables as the SGLang plugin; a flag wins, and an error
    names what the user actually wrote (the flags, or the variables)."""
    import argparse

    from eagle3_top.tracer.transport import curve_flags

    p = argparse.ArgumentParser()
    curve_flags.add_server_arguments(p)
    for name in (curve_flags.ENV_SECRET, curve_flags.ENV_CLIENTS, curve_flags.ENV_ANY_CLIENT):
        monkeypatch.delenv(name, raising=False)
    assert curve_flags.server_from(p.parse_args([])) is None  # nothing anywhere: plain, as before
    monkeypatch.setenv(curve_flags.ENV_SECRET, keys["server_secret"])
    monkeypatch.setenv(curve_flags.ENV_CLIENTS, keys["clients"])
    from_env = curve_flags.server_from(p.parse_args([]))
    assert from_env is not None and from_env.admitted is not None and len(from_env.admitted) == 1
    # --curve-any-client on the command line overrides the variable's directory of clients
    any_client = curve_flags.server_from(p.parse_args(["--curve-any-client"]))
    assert any_client is not None and any_client.admitted is None
    monkeypatch.delenv(curve_flags.ENV_SECRET)
    with pytest.raises(curve.KeyError_, match="EAGLE3_TOP_CURVE_CLIENTS needs EAGLE3_TOP_CURVE_SECRET"):
        curve_flags.server_from(p.parse_args([]))
    with pytest.raises(curve.KeyError_, match="--curve-clients needs --curve-secret"):
        curve_flags.server_from(p.parse_args(["--curve-clients", keys["clients"]]))


def test_record_refused_by_curve_says_so_and_exits_2(keys, tmp_path) -> None:
    """A recorder the server does not admit records nothing: it says so as soon as it knows, names
    the endpoint in its stop line and exits 2 (a connection problem), not 0 with "0 frames"."""
    import signal
    import subprocess
    import sys

    pub = Publisher(
        "tcp://127.0.0.1:0",
        SourceId.local(),
        curve=curve.server_config(keys["server_secret"], keys["clients"]),
    )
    out = tmp_path / "r.mcap"
    rec = subprocess.Popen(
        [sys.executable, "-m", "eagle3_top.tui.cli", "record", pub.bound_endpoint, "-o", str(out),
         "--curve-server-key", keys["server"], "--curve-client-secret", keys["mallory"]],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert rec.stderr is not None
        lines = []
        for line in rec.stderr:  # waits on the recorder's own words, not on a clock
            lines.append(line)
            if "nothing of it is recorded" in line:
                break
        assert f"{pub.bound_endpoint}: {NOT_ADMITTED}: nothing of it is recorded" in lines[-1], lines
        rec.send_signal(signal.SIGINT)
        rest = rec.stderr.read()
        assert rec.wait() == 2, rest
        assert f"refused by 1 of 1 endpoint(s): {pub.bound_endpoint}" in rest and "Traceback" not in rest
    finally:
        if rec.poll() is None:
            rec.kill()
        pub.close()


def test_a_plain_text_publisher_reachable_from_elsewhere_says_so(keys, caplog) -> None:
    """Allowed to bind every interface, a publisher without CURVE warns, once, where its engine logs
    (the toy's stderr, SGLang's or vLLM's log); loopback, or CURVE, and it says nothing."""
    with caplog.at_level(logging.WARNING, logger="eagle3_top.publisher"):
        for endpoint, cfg in (
            ("tcp://0.0.0.0:0", None),
            ("tcp://127.0.0.1:0", None),
            ("tcp://0.0.0.0:0", curve.server_config(keys["server_secret"], keys["clients"])),
        ):
            Publisher(endpoint, SourceId.local(), allow_remote=True, curve=cfg).close()
    warned = [r.getMessage() for r in caplog.records if "not encrypted" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        "eagle3-top publisher tcp://0.0.0.0:0: reachable from other hosts"
    )
    assert "--curve-secret" in warned[0]
