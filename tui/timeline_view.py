"""One request's steps, newest at the bottom: when, its accept length, and its drafts (accepted
path green, rejected red) and bonus token, as text when a tokenizer is known."""

from __future__ import annotations

from rich.text import Text

from .text_panel import TextPanel
from .timeline_data import RequestTimeline
from .token_spans import append_drafts_and_bonus, token_piece
from .token_text import TokenText


def render_timeline(tl: RequestTimeline, rows: int, tokens: TokenText | None) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("step by step ", style="bold underline")
    t.append("time  step  len │ root │ drafts (", style="dim")
    t.append("accepted", style="green")
    t.append(" / ", style="dim")
    t.append("rejected", style="red")
    t.append(") → bonus", style="dim")
    if not tl.steps:
        t.append(
            f"\nnone of its steps is among the last {tl.recent_span} step events this source kept "
            "(the accept lengths above are counted from when this view opened)",
            style="dim",
        )
        return t
    shown = tl.steps[-max(rows - 1, 1) :]
    t0 = tl.steps[0].t
    for s in shown:
        r = s.row
        t.append("\n")
        t.append(f"{s.t - t0:+5.1f}s {s.step:>5} ", style="dim")
        t.append(f"{s.accept_length:>4}", style="bold")
        t.append(f" │ {token_piece(r.root, tokens)} │", style="dim")
        append_drafts_and_bonus(t, r.proposals, r.accepted_mask, r.bonus, tokens)
    return t


class TimelineView(TextPanel):
    def update_from(self, tl: RequestTimeline, tokens: TokenText | None) -> None:
        self.show(render_timeline(tl, self.size.height or 20, tokens))
