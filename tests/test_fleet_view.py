"""The fleet view and the source picker in the real app (Pilot), fed over loopback by real
publishers: mis-wired sources named and their finding grouped, a publisher restarted under a new
pid on the same endpoint shown as restarted with when, a silent one as stale, 120 sources
filtered by typing."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import pytest
import zmq
from conftest import PATIENCE_S, screen_text, wait_until
from eagle3_top.tracer.analysis.diagnose import MIN_AUX_ROWS
from eagle3_top.tracer.schema import AUX, HELLO, STEP, Hello, SourceId, encode
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tui.app import Eagle3TopApp
from eagle3_top.tui.fleet_screen import FleetScreen
from eagle3_top.tui.source_picker import SourcePicker
from stream_samples import hello as sample_hello
from stream_samples import step as sample_step
from test_diagnose import HEALTHY_HELLO, REF_RMS, REF_SKETCH, _manifest
from test_tui_app import publish_steps

SIZE = (120, 34)


def miswired_hello() -> dict:
    """The motivating bug: the ids sit where SGLang does not read them, it captures its defaults."""
    h = copy.deepcopy(HEALTHY_HELLO)
    h["aux"].update(
        ids_read=None, ids_location="top_level", capture_native=[2, 4, 5], capture_canonical=[1, 3, 4]
    )
    return h


def aux_body(rms: list[float]) -> dict:
    return {
        "rows": MIN_AUX_ROWS,
        "slots": 3,
        "rms": rms,
        "mean": [0.0] * 3,
        "absmax": [1.0] * 3,
        "sketch": REF_SKETCH,
    }


def publisher(pid: int, endpoint: str = "tcp://127.0.0.1:0") -> Publisher:
    return Publisher(endpoint, SourceId("gpu", pid, 0, "sglang"), hello_interval_s=0.2, health_interval_s=0.2)


@pytest.fixture
def pubs() -> Iterator[list[Publisher]]:
    made: list[Publisher] = []
    yield made
    for p in made:
        p.close(0.5)


async def test_fleet_names_miswired_sources_and_groups_their_finding(pubs) -> None:
    pubs.extend(publisher(100 + i) for i in range(4))
    miswired = {1, 3}
    for i, p in enumerate(pubs):
        p.set_hello(Hello.from_body(miswired_hello() if i in miswired else copy.deepcopy(HEALTHY_HELLO)))
    app = Eagle3TopApp([p.bound_endpoint for p in pubs], manifest=_manifest(), refresh_hz=20)
    # healthy sources accept 2 of 3 drafts on every request (4 steps of 3 requests: 12 request-steps
    # at length 3 each), mis-wired ones none (4 steps of 1: 4 at length 1). The fleet's accept length
    # is the request-steps' mean, (24 * 3 + 8 * 1) / 32 = 2.5, not the sources' mean (2.0).
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.latest and len(app.latest.sources) == 4, what="4 sources")
        await wait_until(pilot, lambda: all(s.hellos for s in app.latest.sources), what="hellos")
        for i, p in enumerate(pubs):
            for _ in range(3):
                p.publish(AUX, aux_body([4.0, 10.0, 15.0] if i in miswired else REF_RMS))
            publish_steps(p, [[0]] * 4 if i in miswired else [[2, 2, 2]] * 4, n=4, seed=i)
        await wait_until(pilot, lambda: sum(s.steps for s in app.latest.sources) == 16, what="16 steps")
        await wait_until(pilot, lambda: "fleet of 4 · accept len 2.50" in screen_text(app), what="headline")
        await pilot.press("F")
        want = "LAYER_MAP_MISMATCH on 2 of 4 sources: gpu:101:r0, gpu:103:r0"
        await wait_until(pilot, lambda: want in screen_text(app), what="grouped finding")
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.table
        top = [table.get_row_at(i)[0].plain for i in range(table.row_count)]
        assert [t.split()[0] for t in top[:2]] == ["gpu:101:r0", "gpu:103:r0"]  # worst first
        # the merged per-position rates: position 1 accepted by 12 of 16, 2 by 12 of 16, 3 by none
        assert "uncond 75% 75% 0%" in screen_text(app)
        await pilot.press("down", "enter")  # the second-worst row, selected for the detail
        await wait_until(pilot, lambda: not isinstance(app.screen, FleetScreen), what="back")
        assert app.selected == "gpu:103:r0"


def rebind(pid: int, endpoint: str, timeout: float = PATIENCE_S) -> Publisher:
    """A new publisher on the endpoint another just closed (the port may linger a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return publisher(pid, endpoint)
        except zmq.ZMQError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def test_restart_with_a_new_pid_and_a_stale_source(pubs) -> None:
    first = publisher(100)
    pubs.append(first)
    first.set_hello(sample_hello())
    endpoint = first.bound_endpoint
    # a source that says hello, steps once, then goes silent without a goodbye
    raw = zmq.Context.instance().socket(zmq.PUB)
    raw.setsockopt(zmq.LINGER, 0)
    raw.bind("tcp://127.0.0.1:0")
    raw_ep = raw.getsockopt_string(zmq.LAST_ENDPOINT)
    app = Eagle3TopApp([endpoint, raw_ep], refresh_hz=20, stale_after_s=1.0)
    try:
        async with app.run_test(size=SIZE) as pilot:

            def raw_says_hello() -> bool:
                raw.send(encode(HELLO, "quiet:7:r0", 0, time.time(), sample_hello().to_body()))
                return app.latest is not None and app.latest.source("quiet:7:r0") is not None

            await wait_until(pilot, raw_says_hello, what="the quiet source")
            raw.send(encode(STEP, "quiet:7:r0", 1, time.time(), sample_step(1)))
            await wait_until(pilot, lambda: app.latest.source("gpu:100:r0") is not None, what="first")
            await wait_until(pilot, lambda: app.latest.source("gpu:100:r0").health is not None, what="health")
            first.close(0.5)
            pubs.remove(first)
            second = rebind(200, endpoint)
            pubs.append(second)
            second.set_hello(sample_hello())
            await wait_until(
                pilot, lambda: (s := app.latest.source("gpu:200:r0")) and s.health, what="restart"
            )
            started = second.started
            await pilot.press("F")
            clock = time.strftime("%H:%M:%S", time.localtime(started))
            await wait_until(pilot, lambda: f"gpu:100:r0 replaced by pid 200 at {clock}" in screen_text(app))
            await wait_until(pilot, lambda: f"gpu:200:r0 restarted at {clock}" in screen_text(app))
            await wait_until(
                pilot, lambda: "quiet:7:r0 stale, last heard at" in screen_text(app), what="stale"
            )
            text = screen_text(app)
            assert "(was pid 100)" in text and "s ago)" in text
            row = next(
                app.screen.table.get_row_at(i)
                for i in range(app.screen.table.row_count)
                if app.screen.table.get_row_at(i)[0].plain.startswith("gpu:200:r0")
            )
            assert row[-1].plain.startswith(clock) and "was pid 100" in row[-1].plain
    finally:
        raw.close(0)


async def test_picker_filters_120_sources_by_typing() -> None:
    raw = zmq.Context.instance().socket(zmq.PUB)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.SNDHWM, 10_000)
    raw.bind("tcp://127.0.0.1:0")
    endpoint = raw.getsockopt_string(zmq.LAST_ENDPOINT)
    hellos = []
    for i in range(120):
        h = sample_hello().to_body()
        h["engine"] = {"name": "sglang" if i % 2 else "vllm", "version": "1"}
        h["model"]["target_path"] = f"/models/{'llama' if i < 100 else 'qwen'}-{i}"
        hellos.append((f"node{i:03d}:{1000 + i}:r{i % 8}", h))
    app = Eagle3TopApp([endpoint], refresh_hz=10)
    try:
        async with app.run_test(size=SIZE) as pilot:

            def all_heard() -> bool:
                for src, body in hellos:
                    raw.send(encode(HELLO, src, 0, time.time(), body))
                return app.latest is not None and len(app.latest.sources) == 120

            await wait_until(pilot, all_heard, what="120 sources")
            await pilot.press("slash")
            await wait_until(pilot, lambda: isinstance(app.screen, SourcePicker), what="picker")
            picker = app.screen
            assert picker.options.option_count == 120
            await pilot.press(*"qwen")  # the model: 20 sources
            await wait_until(pilot, lambda: picker.options.option_count == 20, what="20 qwen")
            await pilot.press("backspace", "backspace", "backspace", "backspace", *"node04")
            await wait_until(pilot, lambda: picker.options.option_count == 10, what="node040..049")
            assert "10 of 120 sources" in screen_text(app)
            await pilot.press(*"7")  # node047
            await wait_until(pilot, lambda: picker.options.option_count == 1, what="one")
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.selected == "node047:1047:r7", what="selected")
            assert not isinstance(app.screen, SourcePicker)
            # by engine, then the arrows
            await pilot.press("slash")
            await wait_until(pilot, lambda: isinstance(app.screen, SourcePicker), what="picker again")
            await pilot.press(*"vllm")
            await wait_until(pilot, lambda: app.screen.options.option_count == 60, what="60 vllm")
            await pilot.press("home")  # the input's cursor; the list stays where it was
            first = app.screen.options.get_option_at_index(app.screen.options.highlighted).id
            await pilot.press("down", "down", "enter")
            await wait_until(pilot, lambda: not isinstance(app.screen, SourcePicker), what="closed")
            assert app.selected != first and app.latest.source(app.selected).engine == "vllm"
    finally:
        raw.close(0)
