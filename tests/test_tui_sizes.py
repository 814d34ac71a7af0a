"""The monitor at the sizes people run it: 80x24 keeps what answers "is it healthy", help fits any
size, a tall terminal gives the plots room; NO_COLOR is honoured; the theme switches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import screen_text, wait_still, wait_until
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


def demo_with_a_rewrite(path: Path) -> str:
    """The demo recording with its mis-wired engine's hello saying the server rewrote a flag (as
    SGLang does to num_draft_tokens under topk 1): the same frames otherwise, byte for byte."""
    from eagle3_top.tracer.reader.recording import RecordingWriter, read_recording
    from eagle3_top.tracer.schema import HELLO, decode, encode

    writer = RecordingWriter(str(path), flush_interval_s=0.0)
    for f in read_recording(DEMO):
        data = f.data
        ev = decode(data)
        if ev.kind == HELLO and ev.src.startswith("vm:5774"):
            spec = ev.body["spec"]
            spec["requested"] = {**spec["effective"], "num_draft_tokens": 16}
            spec["rewrites"] = [
                {"param": "num_draft_tokens", "from": 16, "to": 4, "reason": "topk=1: num_steps + 1"}
            ]
            data = encode(HELLO, ev.src, ev.seq, ev.ts, ev.body)
        writer.add(data, f.endpoint, f.log_time_ns)
    writer.close()
    return str(path)


async def test_80x24_shows_a_silent_rewrite_and_the_per_position_bars(tmp_path: Path) -> None:
    """The smallest supported terminal with the most on it (a manifest's layer map, two sources):
    the red rewrite line of the config and the per-position bars stay in view (the histogram, the
    probe and the acceptance history give way: the plots, g, have them)."""
    from eagle3_top.tracer.analysis.manifest import load_manifest

    manifest = load_manifest(str(Path(DEMO).parent / "demo-manifest.json"))
    app = ReplayApp(
        Timeline(demo_with_a_rewrite(tmp_path / "rw.mcap"), speed=None), manifest=manifest, refresh_hz=20
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, at_end(app), what="the end")
        await wait_until(pilot, lambda: app.table.row_count == 2, what="both sources")
        await pilot.press("down")  # the mis-wired source
        await wait_until(pilot, lambda: (app.selected or "").startswith("vm:5774"), what="the mis-wired one")
        await wait_until(pilot, lambda: "SPEC_PARAM_REWRITTEN" in screen_text(app), what="its findings")
        await wait_still(pilot)
        text = screen_text(app)
        assert "⚠ num_draft_tokens 16 → 4" in text, text
        assert "per position" in text
        bars = [line for line in text.splitlines() if re.search(r"▏\s+[123] .*│", line)]
        assert len(bars) == 3, text  # positions 1, 2 and 3
        assert "LAYER_IDS_NOT_READ" in text and "latest proposals" in text  # still there too


async def test_findings_wrap_under_their_own_indent_at_80_columns() -> None:
    """A finding's message, fix and evidence run over several lines at 80 columns: each line they
    continue on starts under the text it continues, not at column 0."""
    app = ReplayApp(Timeline(DEMO, speed=None), refresh_hz=20)
    async with app.run_test(size=(80, 40)) as pilot:
        await wait_until(pilot, at_end(app), what="the end")
        await wait_until(pilot, lambda: "1 error" in screen_text(app), what="the findings")
        await pilot.press("f")
        await wait_until(pilot, lambda: "docs: docs/findings.md#" in screen_text(app), what="the report")
        await wait_still(pilot)
        lines = screen_text(app).splitlines()[:-1]  # the footer aside
        names = {s.name for s in app.shown.sources} if app.shown else set()
        body = [line for line in lines[1:] if line.strip() and line.strip() not in names]
        assert body and all(line.startswith("  ") for line in body), "\n".join(lines)
        fix = next(i for i, line in enumerate(lines) if line.startswith("    fix: "))
        assert lines[fix + 1].startswith(" " * 9) and lines[fix + 1].strip()  # under the fix's text


@pytest.mark.parametrize("size", [(200, 50), (80, 24)])
async def test_the_layer_map_says_what_is_wrong_with_a_slot_where_there_is_room(
    size: tuple[int, int],
) -> None:
    """At 200 columns a wrong slot says what training fed it and what the server feeds it, not
    only LAYER; at 80 the same words are cut, never wrapped."""
    from eagle3_top.tracer.analysis.manifest import load_manifest

    manifest = load_manifest(str(Path(DEMO).parent / "demo-manifest.json"))
    app = ReplayApp(Timeline(DEMO, speed=None), manifest=manifest, refresh_hz=20)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, at_end(app), what="the end")
        await wait_until(pilot, lambda: app.table.row_count == 2, what="both sources")
        await pilot.press("down")  # the mis-wired source
        await wait_until(pilot, lambda: "LAYER" in screen_text(app).split("layer map")[-1], what="the map")
        await wait_still(pilot)
        text = screen_text(app)
        if size[0] == 200:
            assert "LAYER MISMATCH: trained on the embeddings, served block 1's output" in text, text
            assert "LAYER MISMATCH: trained on block 5's output, served block 4's output" in text
        else:
            assert "LAYER MISMATCH" in text
