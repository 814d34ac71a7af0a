"""A DataTable whose columns are wide enough for a cell before the cell is first drawn.

Textual widens a column on the table's next idle, after the cell may already have been drawn at the
old width; its render caches are keyed by the table's update count, which a width change does not
move, so the cut cell ("tracer paused" drawn as "trace") stayed on screen until some other cell
changed. Whether the draw or the idle came first was a race that a busy box lost.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey


def cell_width(value: object) -> int:
    """The widest line of a cell as drawn, in terminal cells."""
    if isinstance(value, Text):
        return max((line.cell_len for line in value.split("\n")), default=0)
    return max((cell_len(line) for line in str(value).split("\n")), default=0)


class GrowingTable(DataTable):
    """Columns grow before the cell that needs the room is stored, never after it was drawn."""

    def _widen(self, column_key: ColumnKey | str, value: object) -> None:
        column = self.columns.get(column_key if isinstance(column_key, ColumnKey) else ColumnKey(column_key))
        if column is not None and not column.auto_width:
            return
        width = cell_width(value)
        if column is not None and width > column.content_width:
            column.content_width = width

    def add_row(self, *cells: CellType, **kwargs: Any) -> RowKey:
        for column, value in zip(self.ordered_columns, cells, strict=False):
            self._widen(column.key, value)
        return super().add_row(*cells, **kwargs)

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: CellType,
        *,
        update_width: bool = False,
    ) -> None:
        self._widen(column_key, value)
        super().update_cell(row_key, column_key, value, update_width=update_width)
