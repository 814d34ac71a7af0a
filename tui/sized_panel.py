"""The base of the plots: a panel drawn to its own size from a data value, redrawn only when the
data or the size changed (a resize redraws at once, without waiting for the next snapshot)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events

from .text_panel import TextPanel


class SizedPanel(TextPanel):
    data: Any = None
    _drawn: tuple[Any, int, int] | None = None

    def draw(self, data: Any, width: int, height: int) -> Text:
        raise NotImplementedError

    def set_data(self, data: Any) -> None:
        self.data = data
        self.redraw()

    def redraw(self) -> None:
        w, h = self.size
        if not w or not h or self._drawn == (self.data, w, h):
            return
        self._drawn = (self.data, w, h)
        self.show(self.draw(self.data, w, h))

    def on_resize(self, event: events.Resize) -> None:
        self.redraw()
