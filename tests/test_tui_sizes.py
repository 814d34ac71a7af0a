"""The monitor at the sizes people run it: 80x24 keeps what answers "is it healthy", help fits any
size, a tall terminal gives the plots room; NO_COLOR is honoured; the theme switches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import screen_text, wait_until
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tui.app import Eagle3TopApp
from eagle3_top.tui.help_screen import HelpScreen, help_text
from eagle3_top.tui.replay_app import ReplayApp
from rich.text import Text
from textual.binding import Binding

DEMO = str(Path(__file__).resolve().parents[1] / "examples" / "demo.mcap")


def at_end(app: ReplayApp):
    return lambda: "■ end" in screen_text(app)


@pytest.mark.parametrize("size", [(80, 24), (120, 30), (200, 50)])
async def test_every_size_keeps_the_verdict_in_view(size: tuple[int, int]) -> None:
    app = ReplayApp(Timeline(DEMO, speed=None), refresh_hz=20)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, at_end(app), what="the end")
        await wait_until(pilot, lambda: "1 error" in screen_text(app), what="the findings column")
        lines = screen_text(app).splitlines()
        table = "\n".join(lines[2:5])  # under the status bar and the fleet headline (two sources)
        assert lines[1].startswith(" F fleet of 2 · accept len ")
        # both sources, their accept length and the findings count fit without scrolling
        assert "3.81" in table and "1.17" in table and "none" in table and "1 error" in table
        assert all(len(line) <= size[0] for line in lines)
        assert ("missed/drop" in table) == (size[0] >= 100)  # narrow drops the loss columns
        assert "latest proposals" in screen_text(app)


@pytest.mark.parametrize("size", [(60, 20), (80, 24), (200, 50)])
async def test_help_fits_any_size_and_lists_every_key(size: tuple[int, int]) -> None:
    app = ReplayApp(Timeline(DEMO, speed=None), refresh_hz=20)
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.pause(0.1)
        box = app.screen.query_one("#help-box")
        assert box.region.width <= size[0] and box.region.height <= size[1]
        assert box.region.right <= size[0] and box.region.bottom <= size[1]
    for cls, replay in ((ReplayApp, True), (Eagle3TopApp, False)):
        plain = Text.from_markup(help_text(replay)).plain
        for binding in cls.BINDINGS:
            assert isinstance(binding, Binding)
            if binding.show:
                shown = binding.key_display or binding.key.split(",")[0]
                assert re.search(rf"(?<!\S){re.escape(shown)}(?!\S)", plain), binding.key


def help_shown(app: Eagle3TopApp) -> str:
    """The whole help as drawn in its box (which scrolls at this size)."""
    return str(app.screen.query_one("#help-text").render())


async def test_help_describes_the_keys_of_the_mode_it_is_in(tmp_path: Path) -> None:
    """In a replay p plays and pauses and r records nothing; live, p freezes and r records: the
    help says what the key does where it is pressed."""
    app = ReplayApp(Timeline(DEMO, speed=None), refresh_hz=20)
    async with app.run_test(size=(100, 50)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the replay's help")
        text = help_shown(app)
        assert "play / pause" in text and "home end   start / end" in text
        assert "freeze" not in text and "record what arrives" not in text
        await pilot.press("escape")
        assert "p play/pause" in screen_text(app).splitlines()[-1]  # the footer too
    live = Eagle3TopApp(["tcp://127.0.0.1:9"], record_dir=str(tmp_path), refresh_hz=20)
    async with live.run_test(size=(100, 50)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(live.screen, HelpScreen), what="the live help")
        text = help_shown(live)
        assert "record what arrives" in text
        assert "Replay keys" not in text and "play / pause" not in text
        assert "p pause" in screen_text(live)  # the footer too


async def test_no_color_draws_in_greys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = ReplayApp(Timeline(DEMO, speed=None), refresh_hz=20)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, at_end(app), what="the end")
        assert app.no_color
        strips = app.screen._compositor.render_strips()
        colours = {
            c.triplet
            for strip in strips
            for seg in strip
            if seg.style is not None
            for c in (seg.style.color, seg.style.bgcolor)
            if c is not None and c.triplet is not None
        }
        assert colours and all(r == g == b for r, g, b in colours)


async def test_t_switches_light_and_dark() -> None:
    app = ReplayApp(Timeline(DEMO, speed=None), refresh_hz=20)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.theme == "textual-dark"
        await pilot.press("t")
        assert app.theme == "textual-light"
        await pilot.press("t")
        assert app.theme == "textual-dark"
