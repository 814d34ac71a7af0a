"""Per-position acceptance of the selected source as vertical bars, each beside training's acc_i
for the same position: a draft that fails from some position on shows short red bars next to tall
yellow ones. Part of the plots screen (``g``).

The served figure is the conditional rate, P(position i accepted | i-1 accepted), the one that
compares with SpecForge's training acc_i.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from .fmt import vblock
from .sized_panel import SizedPanel
from .snapshot import SourceSnapshot

SERVED_STYLE = "magenta"
LOW_STYLE = "bold red"
TRAINING_STYLE = "yellow"
Y_LABEL_W = 4  # "0.5┤"


@dataclass(frozen=True)
class PositionData:
    source: str = ""
    served: tuple[float, ...] = ()  # conditional rate, position 1 first
    training: tuple[float, ...] = ()  # training acc_i, position 1 first
    request_steps: int = 0
    low_by: float = 0.2  # served this far below training is a drop (thresholds.acc_mark_gap)

    def low(self, i: int) -> bool:
        return i < len(self.training) and self.served[i] < self.training[i] - self.low_by


def position_data(src: SourceSnapshot | None) -> PositionData:
    if src is None:
        return PositionData()
    s = src.summary
    return PositionData(
        src.name,
        tuple(float(v) for v in s.conditional),
        tuple(src.training_acc),
        s.request_steps,
        src.acc_mark_gap,
    )


def _header(data: PositionData, width: int) -> Text:
    """The key to the colours and the source, shortened to fit: the source name goes first."""
    served = (" served (given i-1)", " served")
    training = (" training acc_i", " acc_i")
    for full in (True, False):
        for with_source in (True, False):
            t = Text.assemble(
                ("per position ", "bold underline"), ("█", SERVED_STYLE), (served[not full], "dim")
            )
            if data.training:
                t.append_text(Text.assemble(("  █", TRAINING_STYLE), (training[not full], "dim")))
            if with_source and data.source:
                t.append(f"  {data.source}", style="dim")
            if t.cell_len <= width:
                return t
    return t


def _bar_widths(npos: int, avail: int, two: bool) -> tuple[int, int]:
    """(bar width, positions shown): bars as wide as 5 cells while every position fits."""
    for bw in (5, 4, 3, 2, 1):
        group = bw * (2 if two else 1) + 1
        if npos * group <= avail:
            return bw, npos
    return 1, max(1, avail // (3 if two else 2))


def render_position_plot(data: PositionData, width: int, height: int) -> Text:
    width, height = max(width, 12), max(height, 3)
    out = Text(no_wrap=True, overflow="crop")
    out.append_text(_header(data, width))
    if not data.source:
        out.append("\nno source", style="dim")
        return out
    if data.request_steps == 0 or not data.served:
        out.append("\nno steps yet", style="dim")
        return out
    two = bool(data.training)
    bw, shown = _bar_widths(len(data.served), width - Y_LABEL_W, two)
    group = bw * (2 if two else 1) + 1
    # header, bars, axis, position numbers, then the values where two rows of bars remain
    value_rows = (2 if two else 1) if group >= 5 else 0
    if height - 3 - value_rows < 2:
        value_rows = 0
    bars_h = max(1, height - 3 - value_rows)
    if shown < len(data.served):
        out.append(f"  (first {shown} of {len(data.served)})", style="dim")
    mid = bars_h // 2
    for r in range(bars_h):
        level_row = bars_h - 1 - r  # rows from the bottom
        out.append("\n")
        label = "1.0┤" if r == 0 else "0.5┤" if r == mid and bars_h >= 3 else "   │"
        out.append(label, style="dim")
        for i in range(shown):
            v = data.served[i]
            out.append(vblock(v * bars_h - level_row) * bw, style=LOW_STYLE if data.low(i) else SERVED_STYLE)
            if two:
                acc = data.training[i] if i < len(data.training) else 0.0
                out.append(vblock(acc * bars_h - level_row) * bw, style=TRAINING_STYLE)
            out.append(" ")
    out.append("\n  0└" + "─" * (shown * group), style="dim")
    out.append("\n" + " " * Y_LABEL_W)
    for i in range(shown):
        out.append(f"{i + 1:^{group - 1}} "[:group], style="dim")
    if value_rows:
        out.append("\n srv", style=SERVED_STYLE)
        for i in range(shown):
            out.append(f"{data.served[i]:^{group}.2f}"[:group], style=LOW_STYLE if data.low(i) else None)
        if two:
            out.append("\n trn", style=TRAINING_STYLE)
            for i in range(shown):
                trained = f"{data.training[i]:.2f}" if i < len(data.training) else "—"
                out.append(f"{trained:^{group}}"[:group])
    return out


class PositionPlot(SizedPanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.data = PositionData()

    def update_from(self, src: SourceSnapshot | None) -> None:
        self.set_data(position_data(src))

    def draw(self, data: PositionData, width: int, height: int) -> Text:
        return render_position_plot(data, width, height)
