"""The requests of one source (Enter on a source): in flight and recent, sortable and filterable;
Enter opens a request's timeline."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input

from .requests_rows import RequestRows, next_sort, request_rows, sort_label
from .requests_table import RequestsTable
from .snapshot import Snapshot
from .text_panel import TextPanel
from .timeline_screen import TimelineScreen


class RequestsScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "back", "back"),
        Binding("s", "sort", "sort"),
        Binding("S", "reverse", "reverse", show=False),
        Binding("slash", "filter", "filter", key_display="/"),
        Binding("i", "internal", "internal"),
        Binding("enter", "timeline", "timeline", show=False),
    ]

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key  # the source
        self.sort = "recent"
        self.reverse = False
        self.text = ""
        self.show_internal = False
        self.rows: RequestRows | None = None
        self.note: str | None = None

    def compose(self) -> ComposeResult:
        self.header = TextPanel(id="requests-header")
        self.filter_input = Input(
            placeholder="filter rids (enter keeps it, escape clears)", id="requests-filter"
        )
        self.filter_input.display = False
        self.table = RequestsTable(id="requests-table")
        yield self.header
        yield self.filter_input
        yield self.table
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()

    def update_from(self, snap: Snapshot) -> None:
        src = snap.source(self.key)
        if src is None or src.requests is None:
            self.note = "this source is gone (forgotten to bound memory, or a replay moved before it)"
            self._header(None, snap)
            return
        self.note = None
        table = src.requests
        self.rows = request_rows(
            table, snap.now, sort=self.sort, reverse=self.reverse, text=self.text,
            show_internal=self.show_internal,
        )  # fmt: skip
        self._header(self.rows, snap, src.name, table.since, table.forgotten, table.overflowed)
        self.table.show_rows(self.rows.rows)

    def _header(
        self,
        rows: RequestRows | None,
        snap: Snapshot,
        name: str | None = None,
        since: float | None = None,
        forgotten: int = 0,
        overflowed: int = 0,
    ) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        if getattr(self.app, "paused", False):  # p froze the display: these rows too
            t.append(" FROZEN ", style="bold black on yellow")
            t.append(" ")
        t.append("requests ", style="bold")
        t.append(name or self.key, style="cyan")
        if rows is None:
            t.append(f"\n{self.note}", style="yellow")
            self.header.show(t)
            return
        t.append(f"  {rows.running} running, {rows.matching - rows.running} done")
        if since is not None:
            t.append(f", seen over {snap.now - since:.0f} s", style="dim")
        if forgotten:
            t.append(f", {forgotten} older forgotten", style="dim")
        if overflowed:
            t.append(f", {overflowed} request-steps missed (monitor behind)", style="bold yellow")
        t.append("\nsorted by ", style="dim")
        t.append(sort_label(self.sort) + (" (reversed)" if self.reverse else ""))
        if self.text:
            t.append("  filter ", style="dim")
            t.append(repr(self.text), style="bold")
        hidden = rows.hidden_internal
        t.append(f"  internal {'shown' if self.show_internal else f'hidden ({hidden})'} (i)", style="dim")
        if len(rows.rows) < rows.matching:
            t.append(f"  showing {len(rows.rows)} of {rows.matching}: filter (/) to narrow", style="yellow")
        self.header.show(t)

    def _refresh(self) -> None:
        snap = getattr(self.app, "shown", None)
        if snap is not None:
            self.update_from(snap)

    # -- actions ---------------------------------------------------------------------------------

    def action_back(self) -> None:
        if self.filter_input.display:
            self.filter_input.display = False
            self.filter_input.value = self.text = ""
            self.table.focus()
            self._refresh()
            return
        self.dismiss(None)

    def action_sort(self) -> None:
        self.sort = next_sort(self.sort)
        self._refresh()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._refresh()

    def action_internal(self) -> None:
        self.show_internal = not self.show_internal
        self._refresh()

    def action_filter(self) -> None:
        self.filter_input.display = True
        self.filter_input.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.text = event.value.strip()
        self._refresh()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.table.focus()

    def on_data_table_row_selected(self, event: RequestsTable.RowSelected) -> None:
        self.action_timeline()

    def action_timeline(self) -> None:
        rid = self.table.selected_rid()
        if rid is not None:
            self.app.push_screen(TimelineScreen(self.key, rid))
