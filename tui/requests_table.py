"""The requests of one source, one row per request, keyed by rid. Across refreshes the cursor stays
on the request the user moved it to; until then, and after home, it stays on the first row (where
the running requests are), after end on the last."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate

from .fmt import short
from .growing_table import GrowingTable
from .requests_rows import RequestRow

COLUMNS = (
    ("rid", "rid"),
    ("state", "state"),
    ("tokens", "tokens"),
    ("steps", "steps"),
    ("acc_len", "acc len"),
    ("last", "last"),
    ("age", "age"),
    ("idle", "idle"),
)
RID_WIDTH = 36  # a uuid4 hex is 32


def seconds(s: float) -> str:
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _cells(r: RequestRow) -> tuple[Text | str, ...]:
    state = Text("running", style="green") if r.running else Text("done", style="dim")
    if r.internal:
        state = Text("internal", style="magenta")
    return (
        Text(short(r.rid, RID_WIDTH), style="magenta" if r.internal else "cyan"),
        state,
        str(r.tokens),
        str(r.steps),
        f"{r.mean_accept_length:.2f}",
        str(r.last_accept_length),
        seconds(r.age_s),
        seconds(r.idle_s) if not r.running else "",
    )


class RequestsTable(GrowingTable):
    # DataTable's home/end scroll sideways only; here they go to the first and the last request
    BINDINGS = [
        Binding("home", "scroll_top", "first", show=False),
        Binding("end", "scroll_bottom", "last", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._rids: tuple[str, ...] = ()
        self._cells: list[tuple[Text | str, ...]] = []
        # "top", "bottom": the cursor keeps to that end as rows come and go; None: to its request.
        # Following the first request instead, the view slid down with it as it finished, and
        # showed only finished rows under a header counting the running ones.
        self._pin: str | None = "top"
        self._placing = False  # the cursor is moved here, not by the user

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        super().watch_cursor_coordinate(old, new)
        if not self._placing and old != new:
            self._pin = None  # the user moved it (keys, mouse): from now on it keeps its request

    def action_scroll_top(self) -> None:
        super().action_scroll_top()
        self._pin = "top"

    def action_scroll_bottom(self) -> None:
        super().action_scroll_bottom()
        self._pin = "bottom"

    def on_mount(self) -> None:
        self._ensure_columns()

    def _ensure_columns(self) -> None:
        # The screen may hand over rows before this table's on_mount ran (the app's refresh tick
        # and the screen's mount race under load): rows added to a table without columns stayed
        # invisible, and later refreshes of the same rids only rewrote cells that were not there.
        if not self.columns:
            for key, label in COLUMNS:
                self.add_column(label, key=key)

    def selected_rid(self) -> str | None:
        if not self._rids or not 0 <= self.cursor_row < len(self._rids):
            return None
        return self._rids[self.cursor_row]

    def show_rows(self, rows: tuple[RequestRow, ...]) -> None:
        self._ensure_columns()
        keep = self.selected_rid()
        rids = tuple(r.rid for r in rows)
        cells = [_cells(r) for r in rows]
        if rids == self._rids:  # same rows, same order: rewrite only the cells that changed
            for i, (new, old) in enumerate(zip(cells, self._cells, strict=True)):
                for j, (a, b) in enumerate(zip(new, old, strict=True)):
                    if a != b:
                        self.update_cell_at(Coordinate(i, j), a)
            self._cells = cells
            return
        at = self.cursor_row
        self._placing = True
        try:
            self.clear()
            self._rids, self._cells = rids, cells
            for r, c in zip(rows, cells, strict=True):
                self.add_row(*c, key=r.rid)
            if self._pin == "top" or not rids:
                self.move_cursor(row=0)
            elif self._pin == "bottom":
                self.move_cursor(row=len(rids) - 1)
            elif keep in rids:
                self.move_cursor(row=rids.index(keep))
            else:  # its request is gone (forgotten, filtered out): its neighbour takes the place
                self.move_cursor(row=min(at, len(rids) - 1))
        finally:
            self._placing = False
