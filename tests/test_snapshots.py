"""Snapshot tests: every screen at 80x24, 120x30 and 200x50, drawn from the demo recording replayed
to its end, so that a layout regression fails CI. Review a change with
`pytest tests/test_snapshots.py --snapshot-report`; accept an intended one with `--snapshot-update`
(the SVGs are in tests/__snapshots__/, viewable in a browser)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import screen_text, wait_still, wait_until
from eagle3_top.tracer.analysis.manifest import load_manifest
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tui.replay_app import ReplayApp
from eagle3_top.tui.token_text import TokenText

ROOT = Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "examples" / "demo.mcap")
SIZES = [(80, 24), (120, 30), (200, 50)]
# Each screen: the keys that open it from the main screen (the second source is the mis-wired
# one), and what it shows once drawn (all of it: the requests view draws its header before its rows).
SCREENS: dict[str, tuple[tuple[str, ...], str | tuple[str, ...]]] = {
    "main": ((), ("latest proposals", "vm:5773:r0 toy")),  # the table laid out, not squeezed
    "requests": (("enter",), ("sorted by", "toy-152")),
    "timeline": (("enter", "enter"), "step by step"),
    "findings": (("down", "f"), "docs: docs/findings.md#"),
    "plots": (("g",), "per position"),
    "help": (("question_mark",), "Keys"),
    "fleet": (("F",), "vs training"),
}


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fleet view says when in local time: one zone, so the drawing is the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def demo_app() -> ReplayApp:
    # The tokenizer is given: the recording's hello names the model directory of the machine that
    # recorded it, which a clone elsewhere does not have.
    return ReplayApp(
        Timeline(DEMO, speed=None),
        manifest=load_manifest(str(ROOT / "examples" / "demo-manifest.json")),
        refresh_hz=20,
        tokenizer=TokenText.load(str(ROOT / "hooks" / "toy" / "weights" / "target")),
    )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare, screen: str, size: tuple[int, int]) -> None:
    app = demo_app()

    async def to_the_end(pilot) -> None:
        await wait_until(pilot, lambda: "■ end" in screen_text(app), what="the end")
        await wait_until(pilot, lambda: "error" in screen_text(app), what="the findings")
        keys, drawn = SCREENS[screen]
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.1)
        wanted = (drawn,) if isinstance(drawn, str) else drawn
        await wait_until(pilot, lambda: all(w in screen_text(app) for w in wanted), what=" and ".join(wanted))
        await wait_still(pilot)

    assert snap_compare(app, terminal_size=size, run_before=to_the_end)
