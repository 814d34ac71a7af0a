"""The monitor's tables: a DataTable that never reads a cell as markup."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey


def plain(value: object) -> object:
    # DataTable parses a plain str cell as Rich markup: "[red]" in a request id would style the
    # row, "[link=...]" would send the terminal a hyperlink (OSC 8). Cells are text, never markup.
    return Text(value, end="") if isinstance(value, str) else value


class PlainTable(DataTable):
    """A DataTable whose str cells are shown as they are, whatever they hold."""

    def add_row(
        self, *cells: CellType, height: int | None = 1, key: str | None = None, label: Any = None
    ) -> RowKey:
        return super().add_row(*map(plain, cells), height=height, key=key, label=label)

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: CellType,
        *,
        update_width: bool = False,
    ) -> None:
        super().update_cell(row_key, column_key, plain(value), update_width=update_width)
