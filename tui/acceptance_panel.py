"""Headline acceptance numbers and the accept-length history sparkline."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline

from .snapshot import SourceSnapshot, window_label
from .text_panel import TextPanel


def render_headline(src: SourceSnapshot | None) -> Text:
    t = Text(no_wrap=True, overflow="crop")
    if src is None:
        return Text("no source", style="dim")
    s = src.summary
    t.append("accept len ", style="dim")
    t.append(f"{s.mean_accept_length:.2f}" if s.request_steps else "—", style="bold green")
    t.append(" (drafts+1)", style="dim")
    if src.speculates:
        t.append("  rate ", style="dim")
        t.append(f"{s.accept_rate:.1%}" if s.request_steps else "—", style="bold")
    else:
        t.append("  no speculation", style="bold")
    t.append("\nverify ", style="dim")
    t.append(f"{s.steps_per_s:,.1f}", style="bold")
    t.append(" steps/s  ", style="dim")
    t.append(f"{s.tokens_per_s:,.0f}", style="bold")
    t.append(" tok/s  ", style="dim")
    t.append(f"{s.verify_steps:,} steps", style="dim")
    t.append(f"  {window_label(src.window_s)}", style="bold cyan" if src.window_s else "dim")
    p = src.payoff
    if p is not None:
        t.append("\nvs no speculation ", style="dim")
        t.append(f"x{p.speedup:.2f}", style="bold green" if p.speedup >= 1 else "bold red")
        t.append(f" of {p.baseline_tok_s:,.0f} tok/s", style="dim")
        t.append("  break-even accept len ", style="dim")
        t.append(f"{p.break_even_accept_length:.2f}", style="bold")
    if src.last_n:
        t.append(f"  b{src.last_batch}×{src.last_n}", style="dim")
    return t


class AcceptancePanel(Vertical):
    """Two lines of numbers and a sparkline of mean accept length per second (last 2 min)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.headline = TextPanel("", id="acc-headline")
        self.spark = Sparkline([], summary_function=max, id="acc-history")

    def compose(self) -> ComposeResult:
        yield self.headline
        yield self.spark

    def update_from(self, src: SourceSnapshot | None) -> None:
        self.headline.show(render_headline(src))
        spark = self.spark
        hist = [] if src is None else list(src.summary.history)
        # Drop the leading seconds before the source started, so the line fills the width.
        while hist and hist[0] == 0.0:
            hist.pop(0)
        if hist != list(spark.data or []):
            spark.data = hist
