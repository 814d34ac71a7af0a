"""The probe's similarity matrix as a heat map: served aux slot (rows) × trained slot (columns),
each cell the mean row cosine between the two (``analysis.probe_compare.similarity_matrix``),
coloured on one scale from grey (unrelated) through orange and yellow to green (the same layer),
with its value printed where the cell is wide enough. A healthy server lights the diagonal. Part of
the plots screen (``g``); the main screen's probe panel is the compact form of the same matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_top.tracer.analysis.probe_compare import MATCH_COSINE, verdict_for
from rich.color import Color
from rich.style import Style
from rich.text import Text

from .sized_panel import SizedPanel
from .snapshot import SourceSnapshot

LABEL_W = 4  # "  s0"
# cosine -> colour, linear between stops; the last stop is the match threshold and above
_STOPS = ((0.0, (58, 58, 58)), (0.5, (175, 95, 0)), (0.9, (215, 175, 0)), (MATCH_COSINE, (0, 175, 0)))
HINT = "eagle3-top probe --server URL --endpoint E --manifest M"


def cell_rgb(v: float) -> tuple[int, int, int]:
    v = 0.0 if v != v else min(max(v, 0.0), MATCH_COSINE)  # NaN and below 0: unrelated
    for (a, ca), (b, cb) in zip(_STOPS, _STOPS[1:], strict=False):
        if v <= b:
            f = (v - a) / (b - a)
            return tuple(round(x + (y - x) * f) for x, y in zip(ca, cb, strict=True))
    return _STOPS[-1][1]


def cell_style(v: float, bold: bool = False) -> Style:
    r, g, b = cell_rgb(v)
    light = 0.299 * r + 0.587 * g + 0.114 * b > 110
    return Style(color="black" if light else "white", bgcolor=Color.from_rgb(r, g, b), bold=bold)


@dataclass(frozen=True)
class HeatmapData:
    has_manifest: bool = False
    source: str = ""
    cells: tuple[tuple[float, ...], ...] = ()  # [served slot][trained slot]
    mapping: tuple[int | None, ...] = ()  # per served slot: the trained slot it matches
    ok: bool = False
    verdict: str = ""
    note: str | None = None  # the comparison's note, or why the latest probe could not be compared


def heatmap_data(src: SourceSnapshot | None, has_manifest: bool) -> HeatmapData:
    if src is None:
        return HeatmapData(has_manifest)
    cmp = src.probe
    if cmp is None:
        return HeatmapData(has_manifest, src.name, note=src.probe_note)
    cells = tuple(tuple(float(x) for x in row) for row in cmp.matrix)
    return HeatmapData(has_manifest, src.name, cells, cmp.mapping, cmp.ok, verdict_for(cmp), cmp.note)


def _no_matrix(data: HeatmapData) -> Text:
    t = Text()
    t.append("probe heat map", style="bold underline")
    if not data.has_manifest:
        t.append("\nneeds a training manifest: start the monitor with --manifest M, then ", style="dim")
    else:
        if data.note:
            t.append(f"\n{data.note}", style="yellow")
        t.append("\nno probe result for this source yet; ", style="dim")
    t.append(HINT, style="bold")
    t.append(" replays training samples through the server and fills it in", style="dim")
    return t


def _value(v: float, room: int) -> str:
    for text in (f"{v:.2f}", f"{v:.1f}"):
        if len(text) <= room:
            return text
    return ""


def render_heatmap(data: HeatmapData, width: int, height: int) -> Text:
    if not data.cells:
        return _no_matrix(data)
    width, height = max(width, 8), max(height, 2)
    served, trained = len(data.cells), len(data.cells[0])
    cw = min(7, max(2, (width - LABEL_W) // max(trained, 1)))
    lines = [
        Text.assemble(
            ("probe ", "bold underline"),
            ("ok" if data.ok else "MISMATCH", "bold green" if data.ok else "bold red"),
            ("  slot cosine", "dim"),
        ),
        # the corner says which way is which: served slots down, trained slots across
        Text("s↓t→" + "".join(f"{'t' + str(j):^{cw}}"[:cw] for j in range(trained)), style="dim"),
    ]
    for i in range(min(served, height - 2)):
        row = Text(f"{'s' + str(i):>{LABEL_W - 1}} ", style="dim")
        for j, v in enumerate(data.cells[i]):
            matched = i < len(data.mapping) and data.mapping[i] == j
            row.append(" ")
            row.append(f"{_value(v, cw - 1):^{cw - 1}}", style=cell_style(v, bold=matched))
        lines.append(row)
    rows_left = height - 2 - served
    if rows_left >= 1:
        scale = Text(" " * (LABEL_W - 2) + "0 ", style="dim")
        n = max(2, min(10, width - LABEL_W - 12))
        for k in range(n):
            scale.append(" ", style=Style(bgcolor=Color.from_rgb(*cell_rgb(k / (n - 1) * MATCH_COSINE))))
        scale.append(f" {MATCH_COSINE:g} match", style="dim")
        lines.append(scale)
    if rows_left >= 2:
        lines.append(Text(data.verdict, style="green" if data.ok else "red"))
    if rows_left >= 3 and data.note:
        lines.append(Text(data.note, style="yellow"))
    for line in lines:  # a line too long for the panel ends in an ellipsis rather than wrapping
        line.truncate(width, overflow="ellipsis")
    return Text("\n").join(lines)


class ProbeHeatmap(SizedPanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.data = HeatmapData()

    def update_from(self, src: SourceSnapshot | None, has_manifest: bool) -> None:
        self.set_data(heatmap_data(src, has_manifest))

    def draw(self, data: HeatmapData, width: int, height: int) -> Text:
        return render_heatmap(data, width, height)
