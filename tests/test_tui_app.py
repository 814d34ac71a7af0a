"""The live app, driven with a Pilot at 100x30 and fed over loopback by a real Publisher.

Assertions read the rendered screen (what a user sees), waiting by polling, never by long sleeps.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import msgpack
import numpy as np
import pytest
import zmq
from conftest import screen_text, wait_until
from eagle3_top.tracer.schema import STEP, Hello, SourceId, encode, step_body
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tui.app import Eagle3TopApp
from eagle3_top.tui.help_screen import HelpScreen

SIZE = (100, 30)

HELLO = {
    "engine": {"name": "sglang", "version": "0.5.23"},
    "model": {
        "target_path": "/models/target",
        "draft_path": "/models/draft",
        "arch": "LlamaForCausalLM",
        "num_layers": 80,
        "hidden_size": 8192,
        "vocab_size": 128256,
        "dtype": "bfloat16",
    },
    "tp": {"rank": 0, "size": 2},
    "spec": {
        "requested": {"algorithm": "EAGLE3", "num_steps": 1, "topk": 1, "num_draft_tokens": 16},
        "effective": {"algorithm": "EAGLE3", "num_steps": 1, "topk": 1, "num_draft_tokens": 2},
        "rewrites": [
            {
                "param": "num_draft_tokens",
                "from": 16,
                "to": 2,
                "reason": "topk=1 forces num_draft_tokens = num_steps + 1",
            }
        ],
    },
    "aux": {
        "eagle_config": None,
        "ids_read": None,
        "capture_native": [2, 40, 77],
        "capture_canonical": [1, 39, 76],
        "convention": "canonical",
        "slots": 3,
        "width": 24576,
        "expected_width": 24576,
    },
}


def shows(app: Eagle3TopApp, text: str) -> Callable[[], bool]:
    return lambda: text in screen_text(app)


def publish_steps(pub: Publisher, accepted_rows: list[list[int]], n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for i, acc in enumerate(accepted_rows):
        a = np.asarray(acc, dtype=np.int32)
        b = a.size
        pub.publish(
            STEP,
            step_body(
                step=i,
                rids=[f"req-{seed}-{j}" for j in range(b)],
                draft=rng.integers(1, 32_000, (b, n)).astype(np.int32),
                accept_lens=a + 1,
                tokens=rng.integers(1, 32_000, int(a.sum()) + b).astype(np.int32),
            ),
        )


def source_steps(app: Eagle3TopApp) -> int:
    snap = app.latest
    return snap.sources[0].steps if snap and snap.sources else 0


@pytest.fixture
def tui_pub() -> Iterator[Publisher]:
    pub = Publisher(
        "tcp://127.0.0.1:0", SourceId.local(engine="sglang"), hello_interval_s=0.1, health_interval_s=0.2
    )
    pub.set_hello(Hello.from_body(HELLO))
    yield pub
    pub.close(0.5)


async def joined(pilot, app: Eagle3TopApp) -> None:
    """Wait until the periodic hello arrives: the subscription is then live, nothing more is lost."""
    await wait_until(
        pilot, lambda: app.latest and app.latest.sources and app.latest.sources[0].hellos, what="hello"
    )


def mean_len(rows: list[list[int]]) -> float:
    flat = [x for r in rows for x in r]
    return sum(flat) / len(flat) + 1


async def test_live_numbers_config_rewrite_and_layers(tui_pub):
    app = Eagle3TopApp([tui_pub.bound_endpoint], refresh_hz=20)
    rows = [[1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 0, 0]]  # n = 2 (effective): accepted in {0, 1}
    async with app.run_test(size=SIZE) as pilot:
        await joined(pilot, app)
        publish_steps(tui_pub, rows, n=2)
        await wait_until(pilot, lambda: source_steps(app) == 3, what="3 steps")
        want = f"{mean_len(rows):.2f}"  # 1.67: accepted + 1
        await wait_until(pilot, shows(app, f"accept len {want}"), what=want)
        text = screen_text(app)
        assert f" {want} " in text.splitlines()[2]  # the sources table row
        assert "num_draft_tokens 16 → 2" in text
        assert "topk=1 forces" in text
        assert "default (ids not read)" in text
        assert "canonical [1, 39, 76]" in text
        assert "✖ SPEC_PARAM_REWRITTEN" in text  # tracer.diagnose findings, errors first
        assert "LAYER_IDS_NOT_READ" in text
        assert "sglang" in text and "live" in text
        assert f"{8 / 12:.1%}" in text  # accept rate: 8 accepted of 12 proposed drafts
        # the findings column: worst severity and count, visible without selecting the source
        errors = sum(1 for f in app.latest.sources[0].findings if f.severity == "error")
        assert errors and f"{errors} error" in text.splitlines()[2]


async def test_findings_view_lists_each_with_fix_evidence_and_docs(tui_pub):
    app = Eagle3TopApp([tui_pub.bound_endpoint], refresh_hz=20)
    async with app.run_test(size=SIZE) as pilot:
        await joined(pilot, app)
        await wait_until(pilot, lambda: app.latest.sources[0].findings, what="findings")
        await pilot.press("f")
        await wait_until(pilot, shows(app, "docs: docs/findings.md#"), what="the findings view")
        text = screen_text(app)
        assert "ERROR   SPEC_PARAM_REWRITTEN" in text
        assert "num_draft_tokens 16 → 2" in text
        assert "fix: request what the server will run" in text
        assert "evidence: param=num_draft_tokens from=16 to=2 reason=" in text
        assert "docs: docs/findings.md#spec_param_rewritten" in text
        assert "LAYER_IDS_NOT_READ" in text
        # the copy is the same text, without colour
        copied: list[str] = []
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.press("c")
        assert copied and "SPEC_PARAM_REWRITTEN" in copied[0] and "\x1b" not in copied[0]
        await pilot.press("escape")
        await wait_until(pilot, lambda: not shows(app, "docs: docs/findings.md#")(), what="back")


def test_every_finding_code_has_a_docs_section() -> None:
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    emitted = set()
    for path in [*root.glob("tracer/analysis/*.py")]:
        emitted |= set(
            re.findall(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)", (?:ERROR|WARNING|INFO)', path.read_text())
        )
        emitted |= set(re.findall(r'Finding\(\s*"([A-Z0-9_]+)"', path.read_text()))
    sections = set(re.findall(r"^## ([A-Z0-9_]+)$", (root / "docs/findings.md").read_text(), re.M))
    assert len(emitted) >= 14, emitted
    assert emitted <= sections, emitted - sections


async def test_pause_freezes_display_but_keeps_ingesting(tui_pub):
    app = Eagle3TopApp([tui_pub.bound_endpoint], refresh_hz=20)
    async with app.run_test(size=SIZE) as pilot:
        await joined(pilot, app)
        publish_steps(tui_pub, [[3, 3, 3, 3]] * 2, n=4)
        await wait_until(pilot, shows(app, "accept len 4.00"), what="4.00")
        await pilot.press("p")
        await wait_until(pilot, shows(app, "FROZEN"), what="FROZEN")
        publish_steps(tui_pub, [[0, 0, 0, 0]] * 2, n=4, seed=1)
        await wait_until(pilot, lambda: source_steps(app) == 4, what="ingest while paused")
        await pilot.pause(0.2)  # several refresh ticks
        text = screen_text(app)
        assert "accept len 4.00" in text and "FROZEN" in text and "TRACER PAUSED" not in text
        await pilot.press("p")
        await wait_until(pilot, shows(app, "accept len 2.50"), what="2.50 after resume")
        assert "FROZEN" not in screen_text(app)


async def test_pause_says_frozen_in_the_requests_view_too(tui_pub):
    """p over the requests view freezes its rows as it does the main screen: the view says so."""
    from eagle3_top.tui.requests_screen import RequestsScreen

    app = Eagle3TopApp([tui_pub.bound_endpoint], refresh_hz=20)
    async with app.run_test(size=SIZE) as pilot:
        await joined(pilot, app)
        publish_steps(tui_pub, [[3, 3]] * 2, n=4)
        await wait_until(pilot, lambda: source_steps(app) == 2, what="2 steps")
        await pilot.press("enter")
        await wait_until(pilot, shows(app, "req-0-1"), what="the requests")
        assert isinstance(app.screen, RequestsScreen) and "FROZEN" not in screen_text(app)
        await pilot.press("p")
        await wait_until(pilot, shows(app, "FROZEN"), what="FROZEN over the requests")
        publish_steps(tui_pub, [[1, 1, 1]] * 2, n=4, seed=1)
        await wait_until(pilot, lambda: source_steps(app) == 4, what="ingest while frozen")
        await pilot.pause(0.2)  # several refresh ticks
        assert "req-1-0" not in screen_text(app) and "FROZEN" in screen_text(app)
        await pilot.press("p")
        await wait_until(pilot, shows(app, "req-1-0"), what="the new requests after p")
        assert "FROZEN" not in screen_text(app)


@pytest.mark.parametrize("where", ["missing", "read-only"])
async def test_r_into_a_directory_that_cannot_take_a_file_says_so_once(tui_pub, tmp_path, where):
    """r with --record-dir missing or not writable: one line saying why, no "recording to" toast,
    no REC; r again says the same instead of pretending to start once more; no file anywhere."""
    import os

    record_dir = tmp_path / where
    if where == "read-only":
        record_dir.mkdir()
        record_dir.chmod(0o500)
        if os.access(record_dir, os.W_OK):  # root writes anywhere: nothing to refuse
            pytest.skip("this user can write into a read-only directory")
    app = Eagle3TopApp([tui_pub.bound_endpoint], record_dir=str(record_dir), refresh_hz=20)
    async with app.run_test(size=SIZE) as pilot:
        await joined(pilot, app)
        for presses in (1, 2):
            await pilot.press("r")
            await wait_until(pilot, shows(app, "cannot record"), what="why not")
            await pilot.pause(0.2)  # several refresh ticks: a worker's late verdict would show
            # the toasts raised so far (a headless run keeps them, it does not draw them)
            toasts = [n.message for n in app._notifications]
            assert not any("recording to" in m for m in toasts), toasts
            assert sum("cannot record" in m for m in toasts) == presses, toasts
            assert "● REC" not in screen_text(app) and not app.feed.recording.active
        publish_steps(tui_pub, [[1, 1]], n=4)
        await wait_until(pilot, lambda: source_steps(app) == 1, what="still receiving")
    assert not list(tmp_path.rglob("*.mcap"))


async def test_help_opens_and_closes_and_q_quits(tui_pub):
    exited: list[bool] = []
    app = Eagle3TopApp([tui_pub.bound_endpoint], on_exit=[lambda: exited.append(True)])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        # the keys come first; the meanings are further down the box, which the keyboard scrolls
        await wait_until(pilot, lambda: "freeze the display" in screen_text(app), what="the keys")
        await pilot.press("end")
        await wait_until(
            pilot,
            lambda: (
                "P(position i accepted | i-1 accepted)" in screen_text(app)
                and "direction cosine" in screen_text(app)
            ),
            what="what the numbers mean",
        )
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help closed")
        await pilot.press("q")
        await wait_until(pilot, lambda: app._exit, what="exit")
    assert exited == [True]
    assert not app.feed.running


async def test_garbage_frames_are_counted_and_shown(tui_pub):
    ctx: zmq.Context = zmq.Context.instance()
    raw = ctx.socket(zmq.PUB)
    raw.setsockopt(zmq.LINGER, 0)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    app = Eagle3TopApp([tui_pub.bound_endpoint, f"tcp://127.0.0.1:{port}"], refresh_hz=20)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await joined(pilot, app)

            def flood() -> bool:
                for _ in range(200):
                    raw.send(b"\xc1 not msgpack at all")
                raw.send(msgpack.packb([1, 2, 3]))
                # a well-formed envelope whose step columns are wrong
                raw.send(
                    encode(
                        STEP,
                        "garbage:1:r0",
                        0,
                        time.time(),
                        {
                            "batch": 2,
                            "n": 4,
                            "rids": ["a", "b"],
                            "draft": b"\x00" * 4,
                            "accepted": b"",
                            "tokens": b"",
                        },
                    )
                )
                return bool(app.latest and app.latest.malformed >= 200)

            await wait_until(pilot, flood, what="malformed counted")
            await wait_until(pilot, shows(app, "last malformed:"), what="malformed shown")
            text = screen_text(app)
            assert "malformed" in text
            assert any(k in text for k in ("not msgpack", "not a map", "step 'draft'"))
            # the app still works: a good source keeps updating
            publish_steps(tui_pub, [[1, 1]], n=2)
            await wait_until(pilot, lambda: any(s.steps for s in app.latest.sources), what="good step")
            assert app.feed.running and app.feed.error is None
    finally:
        raw.close(0)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_down_endpoint_shows_down_then_recovers():
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    app = Eagle3TopApp([endpoint], refresh_hz=20)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, shows(app, "down (retrying)"), what="down")
        assert "(no source yet)" in screen_text(app)
        pub = Publisher(
            endpoint, SourceId.local(engine="sglang"), hello_interval_s=0.1, health_interval_s=0.1
        )
        try:
            pub.set_hello(Hello.from_body(HELLO))
            await wait_until(pilot, shows(app, "connected"), what="reconnected")
            await wait_until(pilot, lambda: app.latest.sources and app.latest.sources[0].hellos, what="hello")
            await wait_until(pilot, shows(app, "live"), what="live row")
            assert "down (retrying)" not in screen_text(app)
        finally:
            pub.close(0.5)


async def test_stale_source_and_health_panel(tui_pub):
    # health every 0.2 s: stale after 1 s of silence, not after a scheduling hiccup on a busy box
    app = Eagle3TopApp([tui_pub.bound_endpoint], refresh_hz=20, stale_after_s=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await joined(pilot, app)
        tui_pub.count_hook_error(RuntimeError("boom in verify hook"))
        tui_pub.count_hook_error(RuntimeError("boom in verify hook"))
        tui_pub.discarded_rows = 3  # rows SGLang's overlap scheduler threw away, left out by the tracer
        await wait_until(pilot, shows(app, "hook err 2"), what="health")
        await wait_until(pilot, shows(app, "tail rows 3"), what="tail rows")
        tui_pub.paused = True  # the server side: distinct from a frozen display
        await wait_until(pilot, shows(app, "TRACER PAUSED"), what="paused")
        await wait_until(pilot, shows(app, "tracer paused"), what="the source's state")
        assert "FROZEN" not in screen_text(app)
        tui_pub.paused = False
        await wait_until(pilot, lambda: "PAUSED" not in screen_text(app), what="resumed")
        assert "dropped 0" in screen_text(app)
        tui_pub.close(0.5)  # silence: the source goes stale, the endpoint goes down
        await wait_until(pilot, shows(app, "STALE"), what="stale")
        await wait_until(pilot, shows(app, "down (retrying)"), what="down")


async def test_selecting_between_sources():
    pubs = [
        Publisher("tcp://127.0.0.1:0", SourceId("host", 100 + i, 0, "sglang"), hello_interval_s=0.1)
        for i in range(2)
    ]
    try:
        for p in pubs:
            p.set_hello(Hello.from_body(HELLO))
        app = Eagle3TopApp([p.bound_endpoint for p in pubs], refresh_hz=20)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.latest and len(app.latest.sources) == 2, what="2 sources")
            publish_steps(pubs[0], [[1, 1]], n=2)
            publish_steps(pubs[1], [[0, 0]], n=2)
            await wait_until(pilot, lambda: all(s.steps for s in app.latest.sources), what="steps")
            first = app.selected
            await pilot.press("tab")
            await wait_until(pilot, lambda: app.selected != first, what="selection moved")
            sel = app.latest.source(app.selected)
            await wait_until(
                pilot, shows(app, f"accept len {sel.summary.mean_accept_length:.2f}"), what="detail"
            )
    finally:
        for p in pubs:
            p.close(0.5)
