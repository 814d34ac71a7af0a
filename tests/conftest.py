from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import Event, SourceId
from eagle3_top.tracer.serving.publisher import MemoryPublisher, Publisher
from patience import HANG_GUARD_S, PATIENCE_S  # noqa: F401  (the tests import them from here)

# Modules whose tests wait 10 s or more on child processes (SGLang's real classes, the torch engine,
# Triton's interpreter), longest first. Started first, they overlap the many short tests instead of
# running alone at the end with a core idle (``make test`` lost about a minute to that tail). Only
# the order changes: a module missing here runs later, no slower.
SLOW_FIRST = (
    "test_sglang_preflight", "test_sglang_defects", "test_sglang_published", "test_sglang_ranks", "test_check_toy",
    "test_check_verdict", "test_snapshots", "test_demo", "test_source_book", "test_hostile_stream",
    "test_toy_export", "test_e2e_tmux", "test_preflight", "test_probe", "test_replay",
    "test_serve_web", "test_recording", "test_sglang_wiring", "test_tp_dp_rehearsal",
    "test_sglang_verify", "test_sglang_plugin", "test_fingerprint_kernels", "test_sglang_export",
    "test_sglang_guard",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__ if item.module else "", len(rank)))


def pytest_report_header() -> str:
    # which SGLang's real classes the sglang tests run against (make test runs them on two)
    try:
        return f"sglang {importlib.metadata.version('sglang')} (CPU, GPU-only packages stood in)"
    except importlib.metadata.PackageNotFoundError:
        return "sglang not installed: the sglang tests skip"


@pytest.fixture
def publisher() -> Iterator[Publisher]:
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(engine="test"), hello_interval_s=0.5)
    yield pub
    pub.close()


def wait_connected(sub: Subscriber, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sub.poll(20)
        if all(state == "connected" for state in sub.endpoints.values()):
            time.sleep(0.1)  # the subscription itself travels after the TCP connect
            return
    raise AssertionError(f"not connected: {sub.endpoints}")


def wait_subscribed(pub: Publisher, count: int = 1, timeout: float = PATIENCE_S) -> None:
    """Until ``count`` subscriptions reached the publisher: what it sends from now on reaches them
    (a PUB socket drops frames for a subscriber still connecting, and a sleep cannot know when it is done)."""
    deadline = time.monotonic() + timeout
    while pub.subscriptions < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{pub.subscriptions} of {count} subscriber(s) joined")
        time.sleep(0.01)


def collect(
    sub: Subscriber, until: Callable[[list[Event]], bool], timeout: float = PATIENCE_S
) -> list[Event]:
    got: list[Event] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(got):
        got.extend(sub.poll(50))
    return got


def poll_until(cond: Callable[[], object], what: str, timeout: float = PATIENCE_S) -> None:
    """Call ``cond`` every 10 ms until it is true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _bound(kind: int) -> Iterator[tuple[zmq.Socket, str]]:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:0")
    yield sock, sock.getsockopt_string(zmq.LAST_ENDPOINT)
    sock.close()


@pytest.fixture
def raw_pub() -> Iterator[tuple[zmq.Socket, str]]:
    yield from _bound(zmq.PUB)


@pytest.fixture
def xpub() -> Iterator[tuple[zmq.Socket, str]]:
    """A raw publisher that knows when a subscriber has joined (XPUB hands the subscription up)."""
    yield from _bound(zmq.XPUB)


@pytest.fixture
def recording_pub() -> MemoryPublisher:
    return MemoryPublisher()


# -- the live app under a Pilot -------------------------------------------------------------------


def screen_text(app: Any) -> str:
    """What the app's screen shows, as text: what a user sees."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_until(
    pilot: Any, cond: Callable[[], object], timeout: float = PATIENCE_S, what: str = ""
) -> None:
    """Poll ``cond`` between short pauses of the app; fail with the screen after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.03)
    raise AssertionError(f"timed out waiting for {what or cond}\n{screen_text(pilot.app)}")


async def wait_still(pilot: Any, quiet: float = 0.3, timeout: float = PATIENCE_S) -> None:
    """Wait until the screen has not changed for ``quiet`` seconds: columns sized, last refresh drawn.

    A fixed pause is not enough on a loaded machine, where a table can be caught between two
    refreshes with its columns still sized for the previous rows.
    """
    deadline = time.monotonic() + timeout
    last = screen_text(pilot.app)
    since = time.monotonic()
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        now = screen_text(pilot.app)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError(f"the screen kept changing for {timeout}s\n{last}")
