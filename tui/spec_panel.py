"""Speculative config (requested vs effective, rewrites in red) and the capture layers in use."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from .fmt import get, layers, short
from .model import SourceSnapshot

SPEC_KEYS = (
    ("algorithm", "algorithm"),
    ("num_steps", "steps"),
    ("topk", "topk"),
    ("num_draft_tokens", "draft tokens"),
)


def render_spec(src: SourceSnapshot | None, width: int = 60) -> Text:
    t = Text(no_wrap=False)
    t.append("config\n", style="bold underline")
    if src is None:
        t.append("no source selected", style="dim")
        return t
    h = src.hello
    if h is None:
        t.append("no hello yet (the tracer repeats it every few seconds)", style="dim")
        return t
    # engine / model line
    eng = " ".join(str(x) for x in (get(h, "engine", "name"), get(h, "engine", "version")) if x)
    model = [get(h, "model", "arch")]
    nl, hs, dt = get(h, "model", "num_layers"), get(h, "model", "hidden_size"), get(h, "model", "dtype")
    if nl is not None:
        model.append(f"{nl}L")
    if hs is not None:
        model.append(f"h{hs}")
    model.append(dt)
    tp_r, tp_s = get(h, "tp", "rank"), get(h, "tp", "size")
    parts = [
        p
        for p in (eng, " ".join(str(m) for m in model if m), f"tp {tp_r}/{tp_s}" if tp_s is not None else "")
        if p
    ]
    t.append(" · ".join(parts) + "\n")
    # speculative config
    req, eff = get(h, "spec", "requested"), get(h, "spec", "effective")
    rewrites = get(h, "spec", "rewrites")
    if not isinstance(rewrites, list):
        rewrites = []
    rewritten = {str(get(r, "param")) for r in rewrites if isinstance(r, dict)}
    t.append("spec ", style="dim")
    first = True
    for key, label in SPEC_KEYS:
        e, r = get(eff, key), get(req, key)
        if e is None and r is None:
            continue
        if not first:
            t.append("  ")
        first = False
        t.append(f"{label} ")
        if r is not None and e is not None and r != e:
            style = "bold red" if key in rewritten else "bold yellow"
            t.append(f"{e}", style=style)
            t.append(f" (req {r})", style=style)
        else:
            t.append(f"{e if e is not None else r}", style="bold")
    t.append("\n")
    for rw in rewrites:
        if not isinstance(rw, dict):
            continue
        t.append("⚠ ", style="bold red")
        t.append(f"{rw.get('param')} {rw.get('from')} → {rw.get('to')}", style="bold red")
        if rw.get("reason"):
            t.append(f" ({rw.get('reason')})", style="red")
        t.append("\n")
    # capture layers
    aux = get(h, "aux")
    if isinstance(aux, Mapping) and aux:
        t.append("layers ", style="dim")
        t.append(f"native {layers(aux.get('capture_native'))}  ")
        t.append("canonical ", style="dim")
        t.append(f"{layers(aux.get('capture_canonical'))}\n", style="bold")
        ids = aux.get("ids_read")
        t.append("draft ids ", style="dim")
        if ids is None:
            t.append("default (ids not read)", style="bold red")
        else:
            t.append(layers(ids), style="bold")
        t.append("\n")
        slots, width_, exp = aux.get("slots"), aux.get("width"), aux.get("expected_width")
        if width_ is not None or slots is not None:
            t.append("aux ", style="dim")
            t.append(
                f"{slots if slots is not None else '?'} slots, width {width_ if width_ is not None else '?'}"
            )
            if exp is not None:
                bad = width_ is not None and exp != width_
                t.append(f" (expected {exp})", style="bold red" if bad else "dim")
            t.append("\n")
    for label, key in (("target", "target_path"), ("draft ", "draft_path")):
        v = get(h, "model", key)
        if v:
            t.append(f"{label} ", style="dim")
            t.append(short(v, max(10, width - 8)) + "\n")
    t.rstrip()
    return t


class SpecPanel(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._last: object = None

    def update_from(self, src: SourceSnapshot | None) -> None:
        key = (None if src is None else (src.key, id(src.hello)), self.size.width)
        if key == self._last:
            return
        self._last = key
        self.update(render_spec(src, self.size.width or 60))
