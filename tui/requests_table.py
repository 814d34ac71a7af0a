"""The requests of one source, one row per request, keyed by rid (the cursor follows its request
across refreshes)."""

from __future__ import annotations

from rich.text import Text
from textual.coordinate import Coordinate

from .fmt import short
from .plain_table import PlainTable
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


class RequestsTable(PlainTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._rids: tuple[str, ...] = ()
        self._cells: list[tuple[Text | str, ...]] = []

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
        self.clear()
        self._rids, self._cells = rids, cells
        for r, c in zip(rows, cells, strict=True):
            self.add_row(*c, key=r.rid)
        if keep in rids:
            self.move_cursor(row=rids.index(keep))
