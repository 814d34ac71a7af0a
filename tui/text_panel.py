"""The base of the monitor's text panels: a ``Static`` that repaints only when its text changed.

Every panel is re-rendered from a fresh snapshot four times a second; most of them show the same
text most of the time (the spec, the layer map, the findings). Textual repaints a widget on every
``update``, and a repaint is the monitor's main cost next to the server, so an unchanged text is
not handed over at all."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class TextPanel(Static):
    _shown: Text | str | None = None

    def show(self, content: Text | str) -> None:
        # rich's Text compares its characters and their style spans: equal means the same pixels
        if content == self._shown:
            return
        self._shown = content
        self.update(content)
