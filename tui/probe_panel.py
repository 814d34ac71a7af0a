"""Probe panel: the latest replayed training sample of the selected source, as a small heat map.

Rows are served aux slots, columns trained slots; each cell is the mean row cosine between them
(``analysis.probe_compare.similarity_matrix``). A healthy server lights the diagonal green; a mis-wired one
shows the mapping off the diagonal or nowhere. Shown when a training manifest is loaded.
"""

from __future__ import annotations

from eagle3_top.tracer.analysis.probe_compare import MATCH_COSINE, verdict_for
from rich.text import Text

from .snapshot import SourceSnapshot
from .text_panel import TextPanel


def _cell_style(v: float, matched: bool) -> str:
    if v >= MATCH_COSINE:
        return "bold black on green" if matched else "black on green"
    if v >= 0.9:
        return "black on yellow"
    if v >= 0.5:
        return "white on dark_orange3"
    return "white on grey23"


def render_probe(src: SourceSnapshot | None) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("probe", style="bold underline")
    cmp = src.probe if src is not None else None
    if cmp is None:
        note = src.probe_note if src is not None else None
        t.append(f"  {note}" if note else "  none yet\n", style="dim" if not note else "yellow")
        if not note:
            t.append("eagle3-top probe --server URL\n  --endpoint E --manifest M", style="dim")
        return t
    t.append("  ")
    t.append("ok: slots match" if cmp.ok else "MISMATCH", style="bold green" if cmp.ok else "bold red")
    m = cmp.matrix
    t.append("\nsrv\\trn", style="dim")
    for j in range(m.shape[1]):
        t.append(f"  t{j:<3d}", style="dim")
    for i in range(m.shape[0]):
        t.append(f"\n  s{i:<4d}", style="dim")
        for j in range(m.shape[1]):
            v = float(m[i, j])
            t.append(" ")
            t.append(
                f"{v:5.2f}", style=_cell_style(v, cmp.mapping[i] == j if i < len(cmp.mapping) else False)
            )
    t.append("\n")
    t.append(verdict_for(cmp), style="green" if cmp.ok else "red")
    return t


class ProbePanel(TextPanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]

    def update_from(self, src: SourceSnapshot | None) -> None:
        self.show(render_probe(src))
