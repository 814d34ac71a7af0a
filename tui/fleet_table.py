"""The fleet view's table: one row per source, worst first (``fleet.worst_key``)."""

from __future__ import annotations

from rich.text import Text

from .fleet import FleetRow, FleetSummary
from .fmt import when
from .plain_table import PlainTable
from .snapshot import Snapshot
from .sources_table import findings_text, state_cell

COLUMNS = ("source", "state", "acc len", "vs training", "steps/s", "tok/s", "findings", "restarted")


def _state(row: FleetRow, snap: Snapshot) -> Text:
    st = row.state
    if st is None:
        return state_cell(row.source, snap)
    at = f" {when(st.at, snap.now)}" if st.at is not None else ""
    return Text(f"{st.what}{at}", style="bold red" if st.what == "gone" else "yellow")


def _restart(row: FleetRow, now: float) -> Text:
    r = row.restart
    if r is None:
        return Text("")
    at = when(r.at, now) if r.at is not None else ""
    return Text(f"{at} {r.detail}".strip(), style="yellow")


class FleetTable(PlainTable):
    """Rebuilt at each refresh (the order moves as sources get better or worse); the cursor stays
    on the source it was on."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def on_mount(self) -> None:
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        # rows may come before on_mount (a refresh reaching a screen just pushed): without columns
        # add_row raised after ``_shown`` was kept, and every later refresh saw "nothing changed"
        if not self.columns:
            for label in COLUMNS:
                self.add_column(label, key=label)

    def selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def update_from(self, fleet: FleetSummary, snap: Snapshot) -> None:
        self._ensure_columns()
        rows = []
        for row in fleet.rows:
            s = row.source.summary
            have = s.request_steps > 0
            exp = row.source.expected_accept_length
            vs = f"{row.ratio:.0%} of {exp:.2f}" if row.ratio is not None and exp else "—"
            cells = (
                Text(row.source.name, overflow="ellipsis", no_wrap=True),
                _state(row, snap),
                Text(f"{s.mean_accept_length:.2f}" if have else "—", style="bold"),
                Text(vs, style="red" if row.ratio is not None and row.ratio < 0.8 else ""),
                f"{s.steps_per_s:,.1f}",
                f"{s.tokens_per_s:,.0f}",
                findings_text(row.source),
                _restart(row, snap.now),
            )
            rows.append((row.source.key, cells))
        shown = tuple((k, tuple(str(c) for c in cells)) for k, cells in rows)
        if shown == self._shown:
            return  # nothing changed: no repaint, the cursor and scroll stay as they are
        self._shown = shown
        keep = self.selected_key()
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        if keep is not None and keep in self.rows:
            self.move_cursor(row=self.get_row_index(keep))
