"""The fleet in one line over the main screen, shown only with more than one source."""

from __future__ import annotations

from rich.text import Text

from .fleet import FleetSummary
from .text_panel import TextPanel


class FleetHeadline(TextPanel):
    def update_from(self, fleet: FleetSummary | None) -> None:
        """``None`` (one source, or none): hidden, and the main screen is laid out as without it."""
        self.display = fleet is not None
        if fleet is None:
            return
        style = "bold red" if fleet.groups and fleet.groups[0].severity == "error" else "bold"
        t = Text("F", style="bold reverse")  # the key that opens the fleet view, where it is read
        t.append(" ")
        t.append(fleet.headline(), style=style)
        t.append("   / picks a source", style="dim")
        self.show(t)
