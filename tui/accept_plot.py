"""Accept length over time, one line per source, with training's expected accept length as a
dashed reference line: the top of the plots screen (``g``).

The widget keeps what it plots as plain data (``AcceptPlotData``), so that a test reads the series
and the reference line, not the braille.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eagle3_top.tracer.analysis.diagnose import expected_accept_length
from eagle3_top.tracer.analysis.manifest import Manifest
from rich.text import Text

from .braille import BrailleCanvas
from .fmt import short
from .sized_panel import SizedPanel
from .snapshot import Snapshot

# Distinct on dark and light terminals, and none of them red or yellow: red means trouble on this
# monitor, yellow is training's.
PALETTE = ("cyan", "magenta", "green", "dodger_blue1", "orange1", "orchid", "spring_green1", "slate_blue1")
TRAINING_STYLE = "yellow"
MIN_SPAN_S = 10  # a plot of a source that just started still reads as time
Y_LABEL_W = 5  # "3.50" and the axis


@dataclass(frozen=True)
class Series:
    name: str
    style: str
    values: tuple[float | None, ...]  # mean accept length per second, oldest first; None: no step

    @property
    def latest(self) -> float | None:
        return next((v for v in reversed(self.values) if v is not None), None)


@dataclass(frozen=True)
class Reference:
    value: float  # training's expected accept length (bonus token included)
    label: str
    style: str


@dataclass(frozen=True)
class AcceptPlotData:
    series: tuple[Series, ...] = ()
    references: tuple[Reference, ...] = ()

    @property
    def span(self) -> int:
        """Seconds shown: from the first second any source ran to now."""
        n = max((len(s.values) for s in self.series), default=0)
        first = min(
            (next((i for i, v in enumerate(s.values) if v is not None), n) for s in self.series), default=n
        )
        return min(n, max(n - first, MIN_SPAN_S))


def plot_data(snap: Snapshot | None, manifest: Manifest | None) -> AcceptPlotData:
    if snap is None:
        return AcceptPlotData()
    series, expected = [], []
    for i, src in enumerate(snap.sources):
        style = PALETTE[i % len(PALETTE)]
        # an accept length is at least 1 whenever a step ran: 0 is a second without one
        series.append(Series(src.name, style, tuple(v if v > 0 else None for v in src.summary.history)))
        value = expected_accept_length(src.hello, manifest)[0] if src.hello is not None else None
        if value is not None:
            expected.append((src, style, value))
    refs: list[Reference] = []
    if expected and max(v for *_, v in expected) - min(v for *_, v in expected) < 0.005:
        refs.append(Reference(expected[0][2], f"training {expected[0][2]:.2f}", TRAINING_STYLE))
    else:  # each source's draft (or server's draft steps) expects its own
        refs.extend(Reference(v, f"{src.key} trn {v:.2f}", style) for src, style, v in expected)
    return AcceptPlotData(tuple(series), tuple(refs))


def _pack(head: Text, items: list[Text], width: int, max_lines: int) -> tuple[list[Text], bool]:
    """The title then the items, two spaces apart, over at most ``max_lines`` lines; whether all fit
    (if not, the last line ends in ``+N more``)."""
    lines = [head.copy()]
    for k, item in enumerate(items):
        sep = 2
        if lines[-1].cell_len + sep + item.cell_len > width:
            if len(lines) < max_lines:
                lines.append(Text())
                sep = 0
            else:
                more = Text(f"  +{len(items) - k} more", style="dim")
                lines[-1].truncate(max(0, width - more.cell_len))
                lines[-1].append_text(more)
                return lines, False
        lines[-1].append(" " * sep)
        lines[-1].append_text(item)
    return lines, True


def _legend(data: AcceptPlotData, width: int, max_lines: int) -> list[Text]:
    """Each source in its colour with its latest second, then the reference lines; in a narrow
    terminal the short title and the source keys without the engine, before giving up on names."""
    attempts: list[tuple[Text, list[Text]]] = []
    for full in (True, False):
        head = (
            Text.assemble(("accept length per second", "bold underline"), (" (x: s ago)", "dim"))
            if full
            else Text("accept len/s", style="bold underline")
        )
        items = []
        for s in data.series:
            latest = f" {s.latest:.2f}" if s.latest is not None else " —"
            name = short(s.name, 28) if full else s.name.split(" ")[0]
            items.append(Text.assemble(("━ ", s.style), (name + latest, s.style)))
        for r in data.references:
            items.append(Text.assemble(("┄ ", r.style), (r.label, r.style)))
        attempts.append((head, items))
    for head, items in attempts:
        lines, fit = _pack(head, items, width, max_lines)
        if fit:
            return lines
    return lines


def _y_range(data: AcceptPlotData, span: int) -> tuple[float, float]:
    vals = [v for s in data.series for v in s.values[-span:] if v is not None]
    vals += [r.value for r in data.references]
    lo = 1.0  # accept length counts the bonus token: never below 1
    hi = max([lo + 0.5, *vals]) + 0.1  # headroom: a line at the top is not lost in the frame
    return lo, math.ceil(hi * 2) / 2


def _x_labels(span: int, cells: int) -> Text:
    """Ticks in seconds ago, ``now`` at the right end; as many as fit 10 cells apart."""
    buf = [" "] * cells
    step = next((s for s in (5, 10, 15, 30, 60) if cells * s / max(span - 1, 1) >= 10), 60)

    def put(at: int, label: str) -> None:
        at = min(max(0, at), cells - len(label))
        if at < 0 or any(c != " " for c in buf[max(0, at - 1) : at + len(label) + 1]):
            return
        buf[at : at + len(label)] = list(label)

    put(cells - 3, "now")
    for ago in range(step, span, step):
        col = round((span - 1 - ago) * (2 * cells - 1) / max(span - 1, 1)) // 2
        label = f"-{ago}s"
        put(col - len(label) // 2, label)
    return Text("".join(buf), style="dim")


def render_accept_plot(data: AcceptPlotData, width: int, height: int) -> Text:
    width, height = max(width, 20), max(height, 4)
    if not data.series:
        return Text.assemble(("accept length per second", "bold underline"), ("\nno source yet", "dim"))
    if all(s.latest is None for s in data.series):
        return Text.assemble(("accept length per second", "bold underline"), ("\nno steps yet", "dim"))
    legend = _legend(data, width, 1 if height < 14 else 2)
    span = data.span
    labels = [r.label for r in data.references]
    # reference labels to the right of the plot when there is room; the legend names them anyway
    right = min(max((len(s) for s in labels), default=0) + 3, 22) if labels and width >= 60 else 0
    cw, ch = width - Y_LABEL_W - right, height - len(legend) - 2
    if ch < 2 or cw < 8:
        return Text("\n").join(legend)
    lo, hi = _y_range(data, span)
    canvas = BrailleCanvas(cw, ch)

    def y_of(v: float) -> int:
        return round((v - lo) / (hi - lo) * (canvas.dots_y - 1))

    def x_of(i: int) -> int:
        return round(i * (canvas.dots_x - 1) / max(span - 1, 1))

    for r in data.references:
        canvas.dashed(y_of(r.value), r.style)
    for s in data.series:
        prev: tuple[int, int] | None = None
        for i, v in enumerate(s.values[-span:]):
            if v is None:
                prev = None
                continue
            pt = (x_of(i), y_of(v))
            if prev is None:
                canvas.dot(*pt, s.style)
            else:
                canvas.line(*prev, *pt, s.style)
            prev = pt
    ref_rows: dict[int, Reference] = {}
    for r in data.references:
        row = ch - 1 - y_of(r.value) // 4
        while row in ref_rows and row > 0:  # two references on one row: the next one up
            row -= 1
        ref_rows.setdefault(row, r)
    step = next((st for st in (0.25, 0.5, 1.0, 2.0, 5.0) if (hi - lo) / st <= max(1, ch // 2)), 10.0)
    ticks = {ch - 1 - y_of(lo + k * step) // 4: lo + k * step for k in range(int((hi - lo) / step) + 1)}
    out = Text(no_wrap=True, overflow="crop")
    for line in legend:
        out.append_text(line)
        out.append("\n")
    for row, cells in enumerate(canvas.rows()):
        if row in ticks:
            out.append(f"{ticks[row]:4.2f}"[:4] + "┤", style="dim")
        else:
            out.append("    │", style="dim")
        for char, style in cells:
            out.append(char, style=style or None)
        ref = ref_rows.get(row)
        if ref is not None and right:
            out.append(f" ◂ {ref.label}"[:right], style=ref.style)
        out.append("\n")
    out.append("    └" + "─" * cw + "\n", style="dim")
    out.append(" " * Y_LABEL_W)
    out.append_text(_x_labels(span, cw))
    return out


class AcceptPlot(SizedPanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.data = AcceptPlotData()

    def update_from(self, snap: Snapshot | None, manifest: Manifest | None) -> None:
        self.set_data(plot_data(snap, manifest))

    def draw(self, data: AcceptPlotData, width: int, height: int) -> Text:
        return render_accept_plot(data, width, height)
