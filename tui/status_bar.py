"""One-line title bar: app title, endpoint states (or, replaying, the scrubber), FROZEN, a
recording in progress, and a worker error if any."""

from __future__ import annotations

from eagle3_top.tracer.reader.replay import Position, speed_label
from rich.text import Text

from .snapshot import Snapshot, window_label
from .text_panel import TextPanel

SCRUBBER_CELLS = 24


def clock_text(seconds: float) -> str:
    """``12.3``, ``1:05.0``, ``2:03:04``: short, and exact enough to seek back to."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{int(m)}:{s:04.1f}"
    h, m = divmod(int(m), 60)
    return f"{h}:{m:02d}:{int(s):02d}"


def render_scrubber(pos: Position, t: Text) -> None:
    state = "▶" if pos.playing and not (pos.at_end and not pos.follow) else "⏸"
    if pos.at_end and not pos.follow:
        state = "■ end"
    t.append(f" {state} {speed_label(pos.speed)} ", style="bold black on cyan")
    t.append(f" {clock_text(pos.elapsed_s)} / {clock_text(pos.length_s)} ")
    filled = round(pos.fraction * SCRUBBER_CELLS)
    t.append("━" * filled, style="cyan")
    t.append("●", style="bold cyan")
    t.append("─" * (SCRUBBER_CELLS - filled), style="dim")
    t.append(f" {pos.fraction * 100:3.0f}% ")
    t.append(f" event {pos.delivered}/{pos.total}", style="dim")
    if pos.follow:
        t.append(" following", style="green")
    if pos.damaged:
        t.append(f" ⚠ {pos.damaged} problem{'s' if pos.damaged > 1 else ''} in the file", style="bold yellow")


def render_status(
    title: str,
    snap: Snapshot | None,
    paused: bool,
    error: str | None,
    replay: Position | None = None,
    recording: str | None = None,
    notice: str | None = None,
) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f" {title} ", style="bold reverse")
    if paused:
        t.append(" FROZEN ", style="bold black on yellow")
    if snap is not None and snap.sources and snap.sources[0].window_s is not None:
        # the table's and the panels' acceptance figures are not since-start: say so up top
        t.append(f" {window_label(snap.sources[0].window_s)} ", style="bold black on cyan")
    if recording:
        t.append(f" ● REC {recording} ", style="bold white on red")
    if error:
        t.append(f" {error} ", style="bold white on red")
    if notice:
        t.append(f" {notice} ", style="bold black on cyan")
    if replay is not None:
        render_scrubber(replay, t)
    if snap is not None:
        for ep, state in snap.endpoints:
            style = (
                "green"
                if state == "connected"
                else ("bold red" if "down" in state or "fail" in state or "refused" in state else "yellow")
            )
            t.append(f" {ep} ", style="dim")
            t.append(state, style=style)
        if snap.malformed:
            t.append(f"  malformed {snap.malformed}", style="bold red")
        if snap.evictions.total:
            t.append(
                f"  {snap.evictions.describe()}", style="bold red" if snap.evictions.proven else "yellow"
            )
        elif snap.evicted_sources:
            t.append(f"  {snap.evicted_sources} sources forgotten", style="yellow")
    return t


class StatusBar(TextPanel):
    def __init__(self, title: str, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.title_text = title

    def update_from(
        self,
        snap: Snapshot | None,
        paused: bool,
        error: str | None = None,
        replay: Position | None = None,
        recording: str | None = None,
        notice: str | None = None,
    ) -> None:
        self.show(render_status(self.title_text, snap, paused, error, replay, recording, notice))
