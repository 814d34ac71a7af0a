"""One request's timeline (Enter on a request): its figures, its accept length per step as a
sparkline, and its recent steps with their drafts."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Sparkline

from .snapshot import Snapshot
from .text_panel import TextPanel
from .timeline_view import TimelineView


class TimelineScreen(Screen[None]):
    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, key: str, rid: str) -> None:
        super().__init__()
        self.key = key
        self.rid = rid

    def compose(self) -> ComposeResult:
        self.header = TextPanel(id="timeline-header")
        self.lens = Sparkline([], id="timeline-lens")
        self.view = TimelineView(id="timeline-steps")
        yield self.header
        yield self.lens
        yield self.view
        yield Footer()

    def on_mount(self) -> None:
        watch = getattr(getattr(self.app, "feed", None), "watch_request", None)
        if watch is not None:
            watch(self.key, self.rid)

    def on_unmount(self) -> None:
        watch = getattr(getattr(self.app, "feed", None), "watch_request", None)
        if watch is not None:
            watch(None, None)

    def update_from(self, snap: Snapshot) -> None:
        tl = snap.timeline
        src = snap.source(self.key)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("request ", style="bold")
        t.append(self.rid, style="cyan")
        t.append("  on ", style="dim")
        t.append(src.name if src is not None else self.key)
        table = src.requests if src is not None else None
        row = table.rids.index(self.rid) if table is not None and self.rid in table.rids else None
        if table is not None and row is not None:
            running = bool(table.in_flight[row])
            t.append("  running" if running else "  done", style="green" if running else "dim")
            t.append(
                f"\n{int(table.tokens[row])} tokens in {int(table.steps[row])} verify steps, "
                f"mean accept length {float(table.mean_accept_length[row]):.2f}, "
                f"last {int(table.last_len[row])}, age {snap.now - float(table.first_seen[row]):.1f} s"
            )
        else:
            t.append("\nno longer tracked (forgotten to bound memory, or the source is gone)", style="yellow")
        if tl is not None and tl.rid == self.rid:
            if tl.lens:
                t.append(f"\naccept length per step ({len(tl.lens)} steps", style="dim")
                t.append(f", min {min(tl.lens)} max {max(tl.lens)})", style="dim")
                self.lens.data = list(tl.lens)
            else:  # a sparkline of nothing is drawn as a full block: say it instead
                t.append("\naccept length per step: no steps of it to plot", style="dim")
            self.lens.display = bool(tl.lens)
            shelf = getattr(self.app, "tokenizers", None)
            tokens = shelf.for_hello(src.hello).tokens if shelf is not None and src is not None else None
            self.view.update_from(tl, tokens)
        self.header.show(t)

    def action_back(self) -> None:
        self.dismiss(None)
