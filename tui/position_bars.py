"""Per-position acceptance bars: unconditional and conditional side by side."""

from __future__ import annotations

from rich.text import Text

from .fmt import hbar
from .snapshot import SourceSnapshot
from .text_panel import TextPanel


def render_positions(src: SourceSnapshot | None, width: int, height: int) -> Text:
    t = Text(no_wrap=True, overflow="crop")
    t.append("per position  ", style="bold underline")
    t.append("uncond", style="cyan")
    t.append(" │ ", style="dim")
    t.append("cond", style="magenta")
    t.append(" (given i-1)", style="dim")
    acc = src.training_acc if src is not None else ()
    if acc:
        t.append(" ◂ acc_i", style="yellow")
    t.append("\n")
    if src is None or src.summary.request_steps == 0:
        t.append("no steps yet", style="dim")
        return t
    if not src.speculates:
        t.append("no speculation: no draft positions", style="dim")
        return t
    unc, con = src.summary.unconditional, src.summary.conditional
    npos = len(unc)
    rows = max(1, height - 1)
    # One column of positions when they fit, else two side by side (column-major), else truncate.
    ncols = 1 if npos <= rows else 2
    per_col = -(-npos // ncols)
    shown_rows = min(per_col, rows)
    colw = width // ncols
    # "  1 " + bar + " 0.82" + " │ " + bar + " 0.91" (+ " ◂0.95" with training's acc_i)
    # (+ 2 spaces between columns)
    tail = 6 if acc else 0
    bw = max(2, (colw - 4 - 5 - 3 - 5 - tail - (2 if ncols > 1 else 0)) // 2)
    for r in range(shown_rows):
        for c in range(ncols):
            i = c * per_col + r
            if i >= npos:
                break
            if c:
                t.append("  ")
            t.append(f"{i + 1:>3} ", style="dim")
            t.append(hbar(float(unc[i]), bw), style="cyan")
            t.append(f" {unc[i]:.2f}"[-5:])
            t.append(" │ ", style="dim")
            t.append(hbar(float(con[i]), bw), style="magenta")
            t.append(f" {con[i]:.2f}"[-5:])
            if acc:
                # training's acc_i beside the served conditional rate: red when far below it
                low = i < len(acc) and con[i] < acc[i] - src.acc_mark_gap
                t.append(
                    f" ◂{acc[i]:.2f}"[-6:] if i < len(acc) else "      ", style="red" if low else "yellow"
                )
        if r < shown_rows - 1:
            t.append("\n")
    hidden = npos - min(npos, shown_rows * ncols)
    if hidden > 0:
        t.append(f"  … {hidden} more", style="dim")
    return t


class PositionBars(TextPanel):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)

    def update_from(self, src: SourceSnapshot | None) -> None:
        self.show(render_positions(src, self.size.width or 48, self.size.height or 12))
