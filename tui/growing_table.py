"""The monitor's tables: a DataTable that shows every cell as the text it is, in a column wide
enough for it before it is first drawn.

Text, never markup: DataTable parses a plain ``str`` cell as Rich markup, so "[red]" in a request
id would style the row and "[link=...]" would send the terminal a hyperlink (OSC 8).

Wide enough first: Textual widens a column on the table's next idle, after the cell may already
have been drawn at the old width; its render caches are keyed by the table's update count, which a
width change does not move, so the cut cell ("tracer paused" drawn as "trace") stayed on screen
until some other cell changed. Whether the draw or the idle came first was a race a busy box lost.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey


def plain(value: object) -> object:
    """A str cell as literal text; anything else as it is."""
    return Text(value, end="") if isinstance(value, str) else value


def cell_width(value: object) -> int:
    """The widest line of a cell as drawn, in terminal cells."""
    text = value if isinstance(value, Text) else Text(str(value))
    return max((line.cell_len for line in text.split("\n")), default=0)


class GrowingTable(DataTable):
    """Cells shown as written, in columns that grow before the cell needing the room is stored."""

    def _widen(self, column_key: ColumnKey | str, value: object) -> None:
        column = self.columns.get(column_key if isinstance(column_key, ColumnKey) else ColumnKey(column_key))
        if column is None or not column.auto_width:
            return
        width = cell_width(value)
        if width > column.content_width:
            column.content_width = width

    def add_row(self, *cells: CellType, **kwargs: Any) -> RowKey:
        shown = [plain(c) for c in cells]
        for column, value in zip(self.ordered_columns, shown, strict=False):
            self._widen(column.key, value)
        return super().add_row(*shown, **kwargs)

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: CellType,
        *,
        update_width: bool = False,
    ) -> None:
        shown = plain(value)
        self._widen(column_key, shown)
        super().update_cell(row_key, column_key, shown, update_width=update_width)
