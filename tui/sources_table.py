"""Sources table: one row per publishing source (engine rank), updated cell by cell."""

from __future__ import annotations

from rich.text import Text

from .plain_table import PlainTable
from .snapshot import Snapshot, SourceSnapshot
from .snapshot_text import findings_cell
from .source_state import BAD, OK, QUIET, WARN, source_state

COLUMNS = (
    ("source", "source"),
    ("state", "state"),
    ("acc_len", "acc len"),
    ("rate", "rate"),
    ("steps", "steps/s"),
    ("tok", "tok/s"),
    ("missed", "missed/drop"),
    ("findings", "findings"),
)

# Under 100 columns the table keeps what answers "is it healthy": rate, steps/s and losses go
# (the detail panels below show them for the selected source).
COMPACT = ("source", "state", "acc_len", "tok", "findings")

_NO_SOURCE = "__no_source__"


_STYLES = {OK: "green", QUIET: "dim", WARN: "bold yellow", BAD: "bold red"}


def state_cell(src: SourceSnapshot, snap: Snapshot) -> Text:
    words, level = source_state(src, snap.endpoints)
    return Text(words, style=_STYLES[level])


def findings_text(src: SourceSnapshot) -> Text:
    words = findings_cell(src.findings, src.findings_error)
    style = (
        "bold red" if "error" in words or "failed" in words else ("yellow" if "warning" in words else "dim")
    )
    return Text(words, style=style)


class SourcesTable(PlainTable):
    """Keyed rows; only changed cells are rewritten, so the cursor and scroll stay put."""

    DEFAULT_CSS = ""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._cells: dict[tuple[str, str], str] = {}
        self.compact = False
        self._shown: tuple[tuple[str, str], ...] = COLUMNS

    def on_mount(self) -> None:
        for key, label in self._shown:
            self.add_column(label, key=key)

    def set_compact(self, compact: bool) -> None:
        """Fewer columns for a narrow terminal; the rows come back at the next update."""
        if compact == self.compact:
            return
        self.compact = compact
        self._shown = tuple(c for c in COLUMNS if c[0] in COMPACT) if compact else COLUMNS
        keep = self.selected_key()
        self.clear(columns=True)
        self._cells.clear()
        for key, label in self._shown:
            self.add_column(label, key=key)
        self._reselect = keep

    def selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None
        return None if key == _NO_SOURCE else key

    _reselect: str | None = None

    def _set_row(self, key: str, all_values: list[Text | str]) -> None:
        by_key = dict(zip((k for k, _ in COLUMNS), all_values, strict=True))
        values = [by_key[k] for k, _ in self._shown]
        if key not in self.rows:
            self.add_row(*values, key=key)
            for (ck, _), v in zip(self._shown, values, strict=True):
                self._cells[(key, ck)] = str(v)
            if key == self._reselect:
                self._reselect = None
                self.move_cursor(row=self.get_row_index(key))
            return
        for (ck, _), v in zip(self._shown, values, strict=True):
            sv = str(v) + (v.style if isinstance(v, Text) and isinstance(v.style, str) else "")
            if self._cells.get((key, ck)) != sv:
                self._cells[(key, ck)] = sv
                self.update_cell(key, ck, v, update_width=True)

    def update_from(self, snap: Snapshot) -> None:
        if not snap.sources:
            state = snap.endpoints[0][1] if len(snap.endpoints) == 1 else "waiting"
            style = "bold red" if "down" in state or "fail" in state else "yellow"
            self._set_row(
                _NO_SOURCE,
                [
                    Text("(no source yet)", style="dim"),
                    Text(state, style=style),
                    "—",
                    "—",
                    "—",
                    "—",
                    # the endpoints are in the status bar: a long list here would widen this
                    # column for good (a DataTable's columns never narrow again)
                    "—",
                    "—",
                ],
            )
            return
        if _NO_SOURCE in self.rows:
            # the placeholder's words must not widen the columns for good: whether the first
            # refresh comes before the first source is a race, and the table would show it
            self.remove_row(_NO_SOURCE)
            for col in self.columns.values():
                col.content_width = col.label.cell_len
        keep = {src.key for src in snap.sources}
        gone = [k.value for k in self.rows if k.value not in keep]
        for key in gone:  # the no-source row, and sources the monitor forgot to bound its memory
            if key is not None:
                self.remove_row(key)
        if gone:
            forgotten = set(gone)
            self._cells = {k: v for k, v in self._cells.items() if k[0] not in forgotten}
        for src in snap.sources:
            s = src.summary
            dropped = src.health.dropped if src.health is not None else None
            missed = f"{src.missed}/{dropped if dropped is not None else '—'}"
            bad = src.missed or bool(dropped)
            have = s.request_steps > 0
            self._set_row(
                src.key,
                [
                    Text(src.name, overflow="ellipsis", no_wrap=True),
                    state_cell(src, snap),
                    Text(f"{s.mean_accept_length:.2f}" if have else "—", style="bold"),
                    ("no spec" if not src.speculates else f"{s.accept_rate:.1%}") if have else "—",
                    f"{s.steps_per_s:,.1f}",
                    f"{s.tokens_per_s:,.0f}",
                    Text(missed, style="red" if bad else ""),
                    findings_text(src),
                ],
            )
