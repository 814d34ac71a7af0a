"""A cell that needs a wider column is never left cut on screen (the sources table once showed a
paused tracer as "trace" for good on a busy box)."""

from __future__ import annotations

import pytest
from eagle3_top.tui.growing_table import GrowingTable
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable


class _One(App):
    def __init__(self, table: DataTable) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        yield self.table


def _line(table: DataTable, y: int) -> str:
    return "".join(seg.text for seg in table.render_line(y))


async def _drawn_before_idle(table: DataTable, new: object) -> str:
    """What the row shows once the table settles, when it was drawn between the update and the idle
    that widens the column (the order a busy box produces)."""
    app = _One(table)
    async with app.run_test(size=(60, 6)) as pilot:
        table.add_column("state", key="state")
        table.add_column("n", key="n")
        table.add_row("live", "1", key="a")
        await pilot.pause()
        table.update_cell("a", "state", new, update_width=True)
        _line(table, 1)  # drawn now, before the table's idle
        await pilot.pause()
        return _line(table, 1)


@pytest.mark.parametrize("new", ["tracer paused", Text("tracer paused", style="bold yellow")])
async def test_an_updated_cell_is_never_left_cut(new: object) -> None:
    assert "tracer paused" in await _drawn_before_idle(GrowingTable(), new)


async def test_added_rows_widen_columns_before_they_are_drawn() -> None:
    table = GrowingTable()
    async with _One(table).run_test(size=(60, 6)) as pilot:
        table.add_column("state", key="state")
        table.add_row("down (retrying)", key="a")
        assert "down (retrying)" in _line(table, 1)
        await pilot.pause()
        assert "down (retrying)" in _line(table, 1)
