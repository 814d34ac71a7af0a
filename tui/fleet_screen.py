"""The fleet view (F): every source merged, worst first, findings grouped by code across sources,
and which sources went stale, closed, went away or restarted, with when. Enter on a row selects
that source for the main screen's detail."""

from __future__ import annotations

from eagle3_top.tracer.analysis.findings import ERROR
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from .fleet import FleetSummary, fleet_summary
from .fleet_table import FleetTable
from .snapshot import Snapshot
from .text_panel import TextPanel

SHOWN_GROUPS = 4  # finding groups and lifecycle lines listed above the table; the rest counted


class FleetScreen(Screen[str | None]):
    """Dismissed with the source the user picked (enter), or None (escape)."""

    BINDINGS = [
        Binding("escape,F", "back", "back"),
        Binding("enter", "pick", "select source", show=False),
    ]

    def compose(self) -> ComposeResult:
        self.header = TextPanel(id="fleet-header")
        self.groups = TextPanel(id="fleet-groups")
        self.events = TextPanel(id="fleet-events")
        self.table = FleetTable(id="fleet-table")
        yield self.header
        yield self.groups
        yield self.events
        yield self.table
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()

    def update_from(self, snap: Snapshot) -> None:
        fleet = fleet_summary(snap)
        self.header.show(_header(fleet))
        self.groups.show(_groups(fleet))
        self.events.show(_events(fleet))
        self.table.update_from(fleet, snap)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_pick()

    def action_pick(self) -> None:
        self.dismiss(self.table.selected_key())

    def action_back(self) -> None:
        self.dismiss(None)


def _header(f: FleetSummary) -> Text:
    t = Text(f.headline(), style="bold")
    t.append(f"\n{f.request_steps:,} request-steps, {f.verify_steps:,} verify steps; ", style="dim")
    t.append(f"accept rate {f.accept_rate:.1%}" if f.request_steps else "no steps yet")
    t.append("\nper position  uncond ")
    t.append(" ".join(f"{u:.0%}" for u in f.unconditional) or "—")
    t.append("   cond ")
    t.append(" ".join(f"{c:.0%}" for c in f.conditional) or "—")
    return t


def _groups(f: FleetSummary) -> Text:
    if not f.groups:
        return Text("no findings on any source", style="green")
    t = Text()
    for i, g in enumerate(f.groups[:SHOWN_GROUPS]):
        t.append("\n" if i else "")
        t.append("✖ " if g.severity == ERROR else "▲ ", style="bold red" if g.severity == ERROR else "yellow")
        t.append(g.describe())
    if len(f.groups) > SHOWN_GROUPS:
        t.append(f"\n… {len(f.groups) - SHOWN_GROUPS} more codes (f lists every finding)", style="dim")
    return t


def _events(f: FleetSummary) -> Text:
    if not f.events:
        return Text("every source live, none restarted", style="green")
    t = Text()
    for i, e in enumerate(f.events[:SHOWN_GROUPS]):
        t.append("\n" if i else "")
        t.append(e.describe(f.now), style="bold red" if e.what == "gone" else "yellow")
    if len(f.events) > SHOWN_GROUPS:
        t.append(f"\n… {len(f.events) - SHOWN_GROUPS} more (the table's state column)", style="dim")
    return t
