"""Speculative config (requested vs effective, rewrites in red) and the capture layers in use."""

from __future__ import annotations

from eagle3_top.tracer.schema import SPEC_KEYS
from rich.text import Text

from .fmt import layers, short
from .snapshot import SourceSnapshot
from .text_panel import TextPanel

SPEC_LABELS = {
    "algorithm": "algorithm",
    "num_steps": "steps",
    "topk": "topk",
    "num_draft_tokens": "draft tokens",
}


def render_spec(src: SourceSnapshot | None, width: int = 60) -> Text:
    t = Text(no_wrap=False)
    t.append("config\n", style="bold underline")
    rewrites = src.hello.rewrites if src is not None and src.hello is not None else ()
    # the server's silent rewrites first: on a short screen they are what must stay in view
    for rw in rewrites:
        t.append("⚠ ", style="bold red")
        t.append(f"{rw.param} {rw.old} → {rw.new}", style="bold red")
        if rw.reason:
            t.append(f" ({rw.reason})", style="red")
        t.append("\n")
    if src is None:
        t.append("no source selected", style="dim")
        return t
    h = src.hello
    if h is None:
        t.append("no hello yet (the tracer repeats it every few seconds)", style="dim")
        return t
    # engine / model line
    m = h.model
    eng = " ".join(x for x in (h.engine, h.engine_version) if x)
    model = " ".join(
        x for x in (m.arch, f"{m.num_layers}L" if m.num_layers is not None else None,
                    f"h{m.hidden_size}" if m.hidden_size is not None else None, m.dtype) if x
    )  # fmt: skip
    tp = f"tp {h.tp_rank}/{h.tp_size}" if h.tp_size is not None else ""
    t.append(" · ".join(p for p in (eng, model, tp) if p) + "\n")
    # speculative config
    rewritten = {r.param for r in h.rewrites}
    t.append("spec ", style="dim")
    first = True
    for key in SPEC_KEYS:
        e = h.effective.get(key) if h.effective else None
        r = h.requested.get(key) if h.requested else None
        if e is None and r is None:
            continue
        if not first:
            t.append("  ")
        first = False
        t.append(f"{SPEC_LABELS[key]} ")
        if r is not None and e is not None and r != e:
            style = "bold red" if key in rewritten else "bold yellow"
            t.append(f"{e}", style=style)
            t.append(f" (req {r})", style=style)
        else:
            t.append(f"{e if e is not None else r}", style="bold")
    t.append("\n")
    # capture layers
    aux = h.aux
    if aux is not None:
        t.append("layers ", style="dim")
        t.append(f"native {layers(aux.capture_native)}  ")
        t.append("canonical ", style="dim")
        t.append(f"{layers(aux.capture_canonical)}\n", style="bold")
        t.append("draft ids ", style="dim")
        if aux.ids_read is None:
            t.append("default (ids not read)", style="bold red")
        else:
            t.append(layers(aux.ids_read), style="bold")
        t.append("\n")
        if aux.width is not None or aux.slots is not None:
            t.append("aux ", style="dim")
            t.append(
                f"{aux.slots if aux.slots is not None else '?'} slots, width {aux.width if aux.width is not None else '?'}"
            )
            if aux.expected_width is not None:
                bad = aux.width is not None and aux.expected_width != aux.width
                t.append(f" (expected {aux.expected_width})", style="bold red" if bad else "dim")
            t.append("\n")
    for label, path in (("target", m.target_path), ("draft ", m.draft_path)):
        if path:
            t.append(f"{label} ", style="dim")
            t.append(short(path, max(10, width - 8)) + "\n")
    t.rstrip()
    return t


class SpecPanel(TextPanel):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._last: object = None

    def update_from(self, src: SourceSnapshot | None) -> None:
        key = (None if src is None else (src.key, id(src.hello)), self.size.width)
        if key == self._last:
            return
        self._last = key
        self.show(render_spec(src, self.size.width or 60))
