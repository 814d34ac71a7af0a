"""Accept-length histogram as vertical columns, one per accept length (accepted drafts + 1)."""

from __future__ import annotations

from rich.text import Text

from .fmt import vblock
from .snapshot import SourceSnapshot
from .text_panel import TextPanel


def render_histogram(src: SourceSnapshot | None, width: int, height: int) -> Text:
    t = Text(no_wrap=True, overflow="crop")
    t.append("accept len hist", style="bold underline")
    if src is None or src.summary.request_steps == 0:
        t.append("\nno steps yet", style="dim")
        return t
    hist = src.summary.histogram[1:]  # index 0 unused: accept length >= 1
    total = max(int(hist.sum()), 1)
    mode = int(hist.argmax()) + 1
    t.append(f"  mode {mode}, {hist[mode - 1] / total:.0%}", style="dim")
    n = len(hist)
    cw = 3 if n * 3 <= width else 2
    n_show = min(n, max(1, width // cw))
    bar_rows = max(1, height - 2)
    peak = max(int(hist[:n_show].max()), 1)
    for r in range(bar_rows):
        t.append("\n")
        lo = (bar_rows - 1 - r) / bar_rows
        for i in range(n_show):
            level = (hist[i] / peak - lo) * bar_rows
            cell = vblock(level) if hist[i] else " "
            t.append(cell * (cw - 1) + " ", style="green")
    t.append("\n")
    for i in range(n_show):
        t.append(f"{i + 1:>{cw - 1}} "[-cw:], style="dim")
    return t


class Histogram(TextPanel):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)

    def update_from(self, src: SourceSnapshot | None) -> None:
        self.show(render_histogram(src, self.size.width or 48, self.size.height or 5))
