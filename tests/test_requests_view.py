"""The requests view and a request's timeline, driven with Pilot on a replayed recording of a
server whose requests come and go (tests/stream_samples.py churn_step)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import screen_text, wait_still, wait_until
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tui.replay_app import ReplayApp
from eagle3_top.tui.requests_screen import RequestsScreen
from eagle3_top.tui.timeline_screen import TimelineScreen
from stream_samples import LIFE, churn_rids, write_session

SECONDS, RATE = 10, 10
LAST = SECONDS * RATE  # the last step's number


@pytest.fixture(scope="module")
def churn(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("req") / "churn.mcap")
    write_session(path, seconds=SECONDS, steps_per_s=RATE, churn=True)
    return path


async def _open_requests(pilot: Any, app: ReplayApp) -> None:
    """``enter`` on the main view, then wait until the requests view is the screen and has rows: a
    key sent before then reaches the main view (``/`` opened its source picker)."""
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, RequestsScreen) and _rows(app), what="rows")


async def _filter(pilot: Any, app: ReplayApp, text: str) -> None:
    """``/``, then the text once the filter box has the focus: keys typed before it has are the
    view's own (``q`` leaves it)."""
    await pilot.press("slash")
    await wait_until(
        pilot, lambda: app.focused is getattr(app.screen, "filter_input", None), what="the filter box"
    )
    await pilot.press(*text, "enter")


def _rows(app: ReplayApp) -> list[list[str]]:
    """The requests table as a user reads it: rid first, one list per row."""
    return [
        line.split()
        for line in screen_text(app).splitlines()[4:]
        if line.strip().startswith(("req", "HEALTH"))
    ]


async def test_enter_on_a_source_lists_its_requests_and_their_figures(churn: str) -> None:
    app = ReplayApp(Timeline(churn, speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 34)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        await _open_requests(pilot, app)
        running = set(churn_rids(LAST))
        text = screen_text(app)
        assert f"{len(running)} running" in text
        rows = {r[0]: r for r in _rows(app)}
        for rid in running:
            assert rows[rid][1] == "running"
        # req10 ran its LIFE steps accepting 10 % 3 = 1 draft each: accept length 2, 2 tokens a step
        r = rows["req10"]
        assert r[1:6] == ["done", str(2 * LIFE), str(LIFE), "2.00", "2"]
        # running ones come first
        states = [r[1] for r in _rows(app)]
        assert states == sorted(states, key=lambda s: s != "running")
        # SGLang's health check is hidden and counted; i shows it, marked internal
        assert "HEALTH_CHECK_5f3a" not in rows and "hidden (1)" in text
        await pilot.press("i")
        await wait_until(pilot, lambda: "HEALTH_CHECK_5f3a" in screen_text(app), what="internal shown")
        assert {r[0]: r for r in _rows(app)}["HEALTH_CHECK_5f3a"][1] == "internal"


async def test_sort_and_filter(churn: str) -> None:
    app = ReplayApp(Timeline(churn, speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        await _open_requests(pilot, app)
        await pilot.press("s")  # tokens generated, most first
        await wait_until(pilot, lambda: "tokens generated" in screen_text(app), what="sorted by tokens")
        tokens = [int(r[2]) for r in _rows(app)]
        assert tokens == sorted(tokens, reverse=True) and tokens[0] == 3 * LIFE
        await _filter(pilot, app, "req2")
        await wait_until(pilot, lambda: "'req2'" in screen_text(app), what="the filter")
        rids = [r[0] for r in _rows(app)]
        assert rids and all("req2" in r for r in rids)
        assert sorted(rids) == sorted(r for r in (f"req{i}" for i in range(LAST // 3 + 1)) if "req2" in r)
        await pilot.press("escape")  # leaves the table, keeps the filter
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, RequestsScreen), what="back")


async def test_a_request_timeline_shows_each_step_and_its_drafts(churn: str) -> None:
    app = ReplayApp(Timeline(churn, speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        await _open_requests(pilot, app)
        rids = [r[0] for r in _rows(app)]
        target = next(r for r in rids if r not in churn_rids(LAST))  # a finished one
        await pilot.press(*["down"] * rids.index(target), "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TimelineScreen), what="the timeline")
        assert app.screen.rid == target
        await wait_until(pilot, lambda: "step by step" in screen_text(app), what="its steps")
        n = int(target[3:])
        length = n % 3 + 1
        text = screen_text(app)
        assert f"{length * LIFE} tokens in {LIFE} verify steps" in text
        assert f"{LIFE} steps, min {length} max {length}" in text
        step_lines = [line for line in text.splitlines() if line.strip().startswith("+") and "→" in line]
        assert len(step_lines) == LIFE
        first = 3 * n  # request n joins at step 3n
        assert [int(line.split()[1]) for line in step_lines] == list(range(first, first + LIFE))
        assert all(int(line.split()[2]) == length for line in step_lines)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, RequestsScreen), what="back to requests")
        assert not any(st.requests.watched for st in app.feed.book.sources.values())


async def test_rows_handed_over_before_the_table_is_mounted_are_shown() -> None:
    """Under load the app's refresh can reach a freshly pushed requests screen before its table's
    on_mount: those rows must show, and stay when the next refresh brings the same requests."""
    from eagle3_top.tui.requests_rows import RequestRow
    from eagle3_top.tui.requests_table import RequestsTable
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    rows = tuple(RequestRow(f"req-{i}", False, True, 10 + i, 5, 3.5, 4, 2.0, 0.0) for i in range(3))

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield Static("requests")

    app = Host()
    async with app.run_test(size=(100, 12)) as pilot:
        early = RequestsTable(id="t")
        early.show_rows(rows)  # built and handed rows, not yet mounted
        await app.mount(early)
        await pilot.pause(0.1)
        early.show_rows(rows)  # the next refresh: same rids, cells rewritten in place
        await pilot.pause(0.1)
        assert early.row_count == 3 and len(early.columns) == 8
        text = screen_text(app)
        assert all(f"req-{i}" in text for i in range(3)) and "running" in text


def _cursor_rid(app: ReplayApp) -> str | None:
    """The request the table highlights (its own idea of the cursor's row)."""
    t = app.screen.table
    return t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value if t.row_count else None


def _header_running(app: ReplayApp) -> int:
    line = next(line for line in screen_text(app).splitlines() if " running, " in line)
    return int(line.split(" running, ")[0].split()[-1])


async def test_the_cursor_keeps_its_request_and_the_top_shows_the_running_ones(churn: str) -> None:
    """Requests come and go under the view: opened, the view stays at the top, where the running
    requests are (as many as the header says); a request the user moved to stays under the cursor;
    home and end go to the first and the last row."""
    app = ReplayApp(Timeline(churn, speed=None), refresh_hz=20)
    async with app.run_test(size=(100, 20)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        app.timeline.seek_fraction(0.3)
        await _open_requests(pilot, app)

        def running_on_top() -> bool:
            states = [r[1] for r in _rows(app)]
            n = _header_running(app)
            return n > 0 and states[:n] == ["running"] * n and "running" not in states[n:]

        await wait_until(pilot, running_on_top, what="the running requests on top")
        app.timeline.seek_fraction(1.0)  # the requests on top finish, newer ones start
        await wait_until(pilot, lambda: app.timeline.position().at_end, what="the end")
        await wait_until(pilot, lambda: _rows(app)[0][0] in churn_rids(LAST), what="the newest on top")
        assert running_on_top() and _cursor_rid(app) == _rows(app)[0][0]

        app.timeline.seek_fraction(0.3)
        await wait_until(pilot, lambda: "seen over 3 s" in screen_text(app), what="back at 30%")
        await wait_still(pilot)
        await pilot.press("down", "down", "down")
        chosen = app.screen.table.selected_rid()
        assert chosen is not None and _cursor_rid(app) == chosen
        app.timeline.seek_fraction(0.6)  # rows arrive above and around it
        await wait_until(pilot, lambda: "seen over 6 s" in screen_text(app), what="at 60%")
        await wait_still(pilot)
        assert _cursor_rid(app) == chosen and app.screen.table.selected_rid() == chosen
        assert chosen in {r[0] for r in _rows(app)}  # scrolled into view

        await pilot.press("end")
        table = app.screen.table
        await wait_until(pilot, lambda: table.cursor_row == table.row_count - 1, what="the last row")
        await pilot.press("home")
        await wait_until(pilot, lambda: table.cursor_row == 0, what="the first row")
        assert running_on_top()


async def test_a_timeline_with_no_steps_left_says_so_instead_of_drawing_a_block(churn: str) -> None:
    """req0 ran the first LIFE steps; at the end of the recording they are long out of the last 64
    step events the source keeps whole: its timeline has nothing to plot, and says so in words."""
    app = ReplayApp(Timeline(churn, speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end of the replay")
        await _open_requests(pilot, app)
        await _filter(pilot, app, "req0")
        await wait_until(pilot, lambda: [r[0] for r in _rows(app)] == ["req0"], what="req0 alone")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TimelineScreen), what="the timeline")
        await wait_until(pilot, lambda: "step by step" in screen_text(app), what="its steps")
        await wait_still(pilot)
        text = screen_text(app)
        assert "no steps of it to plot" in text and "none of its steps is among the last 64" in text
        assert not any("█" in line or "▇" in line for line in text.splitlines()), text
