"""The latest step's draft proposals: accepted path in green, rejected tokens in red."""

from __future__ import annotations

from rich.text import Text

from .fmt import short
from .snapshot import SourceSnapshot
from .text_panel import TextPanel


def render_proposals(src: SourceSnapshot | None, width: int) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("latest proposals ", style="bold underline")
    t.append("rid [accepted] root │ drafts (", style="dim")
    t.append("accepted", style="green")
    t.append(" / ", style="dim")
    t.append("rejected", style="red")
    t.append(") → bonus", style="dim")
    if src is None or not src.proposals:
        t.append("\nno steps yet", style="dim")
        return t
    for row in src.proposals:
        t.append("\n")
        t.append(f"{short(row.rid, 10):<10} ", style="cyan")
        t.append(f"[{row.accepted:>2}] ", style="dim")
        t.append(f"{row.root:>6} │", style="dim")
        for tok, ok in zip(row.proposals, row.accepted_mask, strict=False):
            t.append(f" {tok}", style="green" if ok else "red dim")
        if row.bonus is not None:
            t.append(f" → {row.bonus}", style="bold")
    return t


class Proposals(TextPanel):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)

    def update_from(self, src: SourceSnapshot | None) -> None:
        self.show(render_proposals(src, self.size.width or 100))
