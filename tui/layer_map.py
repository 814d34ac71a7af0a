"""Layer map: slot by slot, the trained layer against the served one and the fingerprint distance.

Shown when a training manifest is loaded. A slot whose served layer differs from training, or whose
live fingerprint is far from training's, is red; the findings strip below it carries the fix.
"""

from __future__ import annotations

from rich.text import Text

from .fmt import num
from .snapshot import SourceSnapshot
from .text_panel import TextPanel


def render_layer_map(src: SourceSnapshot | None) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("layer map", style="bold underline")
    rows = src.layer_rows if src is not None else ()
    if not rows:
        t.append("  waiting for the source's hello" if src is not None else "  no source", style="dim")
        return t
    t.append("  slot trained served  rms live/train    cos  status   ", style="dim")
    t.append("(canonical: block k output, -1 = embedding)\n", style="dim")
    for r in rows:
        style = "" if r.ok else "bold red"
        status = "ok" if r.ok else (_mismatch(r.trained, r.served) if not r.layer_ok else _DRIFT)
        if r.layer_ok and r.stats_ok is None:
            status = "ok (stats pending)"
        served = "—" if r.served is None else str(r.served)
        trained = "—" if r.trained is None else str(r.trained)
        t.append(
            f"           {r.slot:4d} {trained:>7s} {served:>6s}  {num(r.rms_live):>7s}/{num(r.rms_trained):<7s} "
            f"{num(r.cosine, '.2f'):>5s}  ",
            style=style,
        )
        t.append(status + "\n", style=style or "green")
    t.rstrip()
    return t


# what a wrong slot means, in words: the line ends there, so a wide terminal shows all of it and a
# narrow one cuts it (the findings below carry the fix)
_DRIFT = "DRIFT: the served values are far from training's (rms or direction)"


def _layer(canonical: int | None) -> str:
    if canonical is None:
        return "nothing"
    return "the embeddings" if canonical == -1 else f"block {canonical}'s output"


def _mismatch(trained: int | None, served: int | None) -> str:
    return f"LAYER MISMATCH: trained on {_layer(trained)}, served {_layer(served)}"


class LayerMap(TextPanel):
    def update_from(self, src: SourceSnapshot | None) -> None:
        rows = len(src.layer_rows) if src is not None else 0
        self.styles.height = (rows + 1 if rows else 1) + 1  # + the border line
        self.show(render_layer_map(src))
