"""Tracer health (its own counters) and transport health (missed, malformed, stale)."""

from __future__ import annotations

from rich.text import Text

from .fmt import short
from .snapshot import Snapshot, SourceSnapshot
from .text_panel import TextPanel


def _kv(t: Text, k: str, v: object, bad: bool = False) -> None:
    t.append(f"{k} ", style="dim")
    t.append(f"{v}", style="bold red" if bad else "bold")
    t.append("  ")


def _n(v: int | None) -> str:
    return "—" if v is None else str(v)


def _line(t: Text, label: str, text: str, width: int, style: str = "red") -> None:
    t.append(label, style="dim" if style == "red" else style)
    t.append(short(text, max(10, width - len(label))), style=style)


def render_health(src: SourceSnapshot | None, snap: Snapshot, width: int) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("health ", style="bold underline")
    h = src.health if src is not None else None
    if src is not None:
        if h is None:
            t.append("no health event yet  ", style="dim")
        else:
            _kv(t, "dropped", _n(h.dropped), bool(h.dropped))
            _kv(t, "queue", f"{_n(h.queue)}/{_n(h.queue_max)}")
            _kv(t, "hook err", _n(h.hook_errors), bool(h.hook_errors))
            if h.discarded_rows:  # normal under SGLang's overlap scheduler: informational, not red
                _kv(t, "tail rows", h.discarded_rows)
            if h.encode_errors:
                _kv(t, "encode err", h.encode_errors, True)
            if h.paused:
                t.append("TRACER PAUSED  ", style="bold yellow")
            _kv(t, "disabled", "YES" if h.disabled else "no", h.disabled)
        _kv(t, "missed", src.missed, bool(src.missed))
        if src.malformed:
            _kv(t, "bad frames", src.malformed, True)
        if src.stale:
            t.append(f"STALE {src.age_s:.0f}s", style="bold yellow")
            t.append("  ")
    _kv(t, "malformed", snap.malformed, bool(snap.malformed))
    if snap.unknown_kinds:
        _kv(t, "unknown kinds", snap.unknown_kinds)
    t.append("\n")
    # One second line, the most urgent news first.
    last_err = h.last_error if h is not None else None
    loss = src.loss if src is not None else None
    if h is not None and h.engine_error:
        _line(t, "ENGINE FAILED: ", h.engine_error, width, "bold red")
    elif src is not None and src.last_malformed:
        _line(t, "last malformed: ", src.last_malformed, width)
    elif snap.last_malformed:
        _line(t, "last malformed: ", snap.last_malformed, width)
    elif loss is not None and (loss.gaps or loss.restarts or loss.resyncs):
        _line(t, "loss: ", loss.describe(), width, "yellow")
    elif last_err:
        _line(t, "tracer last error: ", last_err, width)
    else:
        t.append(f"{snap.frames:,} frames  {snap.bytes / 1e6:,.1f} MB received", style="dim")
    return t


class HealthPanel(TextPanel):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)

    def update_from(self, src: SourceSnapshot | None, snap: Snapshot) -> None:
        self.show(render_health(src, snap, self.size.width or 100))
