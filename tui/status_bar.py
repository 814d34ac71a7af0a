"""One-line title bar: app title, endpoint states, PAUSED, and a worker error if any."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from .snapshot import Snapshot


def render_status(title: str, snap: Snapshot | None, paused: bool, error: str | None) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f" {title} ", style="bold reverse")
    if paused:
        t.append(" PAUSED ", style="bold black on yellow")
    if error:
        t.append(f" {error} ", style="bold white on red")
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
        if snap.evicted_sources:
            t.append(f"  {snap.evicted_sources} sources forgotten", style="yellow")
    return t


class StatusBar(Static):
    def __init__(self, title: str, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.title_text = title

    def update_from(self, snap: Snapshot | None, paused: bool, error: str | None = None) -> None:
        self.update(render_status(self.title_text, snap, paused, error))
