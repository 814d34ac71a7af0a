"""Small text helpers shared by the widgets (Rich Text building, bars, numbers)."""

from __future__ import annotations

import time
from typing import Any

_EIGHTHS = " ▏▎▍▌▋▊▉█"
_VBLOCKS = " ▁▂▃▄▅▆▇█"


def hbar(frac: float, width: int) -> str:
    """A horizontal bar of ``width`` cells filled to ``frac`` (0..1), with eighth-cell resolution."""
    width = max(0, width)
    frac = 0.0 if frac != frac else min(max(frac, 0.0), 1.0)  # NaN -> 0
    eighths = int(round(frac * width * 8))
    full, part = divmod(eighths, 8)
    s = "█" * full
    if part and full < width:
        s += _EIGHTHS[part]
    return s.ljust(width)


def vblock(level: float) -> str:
    """One cell of a vertical bar filled to ``level`` (0..1)."""
    level = min(max(level, 0.0), 1.0)
    return _VBLOCKS[int(round(level * 8))]


def num(v: float | None, spec: str = ".3g") -> str:
    """A number in ``format`` spec ``spec``, or a dash for none."""
    return "—" if v is None else format(v, spec)


def short(s: Any, width: int) -> str:
    s = "" if s is None else str(s)
    if len(s) <= width:
        return s
    return "…" + s[-(width - 1) :] if width > 1 else s[:width]


def layers(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def when(at: float, now: float) -> str:
    """A moment as the user reads it: local wall-clock time, and how long before ``now``."""
    ago = max(0.0, now - at)
    return f"{time.strftime('%H:%M:%S', time.localtime(at))} ({ago:.0f}s ago)"
