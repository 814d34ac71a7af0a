"""All findings, each with its evidence, fix and docs section (f); c copies them as plain text."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from .findings_report import findings_report
from .snapshot import Snapshot
from .text_panel import TextPanel


class FindingsScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,f", "back", "back"),
        Binding("c", "copy", "copy all"),
    ]

    def __init__(self, first: str | None = None) -> None:
        super().__init__()
        self.first = first  # the selected source, listed first

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="findings-scroll"):
            self.report = TextPanel(id="findings-report")
            yield self.report
        yield Footer()

    def update_from(self, snap: Snapshot) -> None:
        self.report.show(findings_report(snap, self.first, self.report.size.width or None))

    def action_copy(self) -> None:
        text = self.report._shown
        plain = text.plain if text is not None and not isinstance(text, str) else (text or "")
        # OSC 52: the terminal puts it on the clipboard, over SSH too (where the terminal allows it)
        self.app.copy_to_clipboard(plain)
        self.notify(f"copied {plain.count(chr(10))} lines (if the terminal allows OSC 52 clipboard access)")

    def action_back(self) -> None:
        self.dismiss(None)
