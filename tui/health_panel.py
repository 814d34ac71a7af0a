"""Tracer health (its own counters) and transport health (missed, malformed, stale)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from .fmt import get, short
from .model import Snapshot, SourceSnapshot


def _kv(t: Text, k: str, v: object, bad: bool = False) -> None:
    t.append(f"{k} ", style="dim")
    t.append(f"{v}", style="bold red" if bad else "bold")
    t.append("  ")


def render_health(src: SourceSnapshot | None, snap: Snapshot, width: int) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("health ", style="bold underline")
    h = src.health if src is not None else None
    if src is not None:
        if h is None:
            t.append("no health event yet  ", style="dim")
        else:
            dropped = get(h, "dropped")
            _kv(t, "dropped", dropped if dropped is not None else "—", bool(dropped))
            q, qm = get(h, "queue"), get(h, "queue_max")
            _kv(t, "queue", f"{q if q is not None else '—'}/{qm if qm is not None else '—'}")
            he = get(h, "hook_errors")
            _kv(t, "hook err", he if he is not None else "—", bool(he))
            dr = get(h, "discarded_rows")
            if dr:  # normal under SGLang's overlap scheduler: informational, not red
                _kv(t, "tail rows", dr)
            ee = get(h, "encode_errors")
            if ee:
                _kv(t, "encode err", ee, True)
            if get(h, "paused"):
                t.append("PAUSED  ", style="bold yellow")
            dis = get(h, "disabled")
            _kv(t, "disabled", "YES" if dis else "no", bool(dis))
        _kv(t, "missed", src.missed, bool(src.missed))
        if src.stale:
            t.append(f"STALE {src.age_s:.0f}s", style="bold yellow")
            t.append("  ")
    _kv(t, "malformed", snap.malformed, bool(snap.malformed))
    if snap.unknown_kinds:
        _kv(t, "unknown kinds", snap.unknown_kinds)
    last_err = get(h, "last_error") if h else None
    t.append("\n")
    if snap.last_malformed:
        t.append("last malformed: ", style="dim")
        t.append(short(snap.last_malformed, max(10, width - 16)), style="red")
    elif last_err:
        t.append("tracer last error: ", style="dim")
        t.append(short(last_err, max(10, width - 19)), style="red")
    else:
        t.append(f"{snap.frames:,} frames  {snap.bytes / 1e6:,.1f} MB received", style="dim")
    return t


class HealthPanel(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)

    def update_from(self, src: SourceSnapshot | None, snap: Snapshot) -> None:
        self.update(render_health(src, snap, self.size.width or 100))
