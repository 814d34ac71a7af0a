"""Pick a source by typing (/): a substring of its key, engine or model filters the list, arrows
move, enter selects it for the main screen's detail. Built for fleets of hundreds of sources."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from .snapshot import SourceSnapshot


def haystack(src: SourceSnapshot) -> str:
    """What the filter matches, lower-cased: the key, the engine, the target and draft models."""
    model = src.hello.model if src.hello is not None else None
    parts = [src.key, src.engine]
    if model is not None:
        parts += [model.target_path or "", model.draft_path or "", model.arch or ""]
    return " ".join(parts).lower()


def matching(sources: Sequence[SourceSnapshot], text: str) -> list[SourceSnapshot]:
    needle = text.strip().lower()
    return [s for s in sources if needle in haystack(s)]


class SourcePicker(ModalScreen[str | None]):
    """Dismissed with the key of the source picked, or None (escape)."""

    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        Binding("down", "move(1)", show=False),
        Binding("up", "move(-1)", show=False),
        Binding("pagedown", "move(10)", show=False),
        Binding("pageup", "move(-10)", show=False),
    ]

    def __init__(self, sources: Sequence[SourceSnapshot], selected: str | None = None) -> None:
        super().__init__()
        self.sources = list(sources)
        self.selected = selected

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-box"):
            self.input = Input(placeholder="filter: source, engine or model", id="picker-input")
            self.options = OptionList(id="picker-options")
            yield self.input
            yield self.options

    def on_mount(self) -> None:
        self._fill("")
        self.input.focus()

    def _fill(self, text: str) -> None:
        shown = matching(self.sources, text)
        self.options.clear_options()
        self.options.add_options([Option(_label(s), id=s.key) for s in shown])
        keys = [s.key for s in shown]
        self.options.highlighted = (
            keys.index(self.selected) if self.selected in keys else (0 if keys else None)
        )
        self.options.border_title = f"{len(shown)} of {len(self.sources)} sources"

    @on(Input.Changed, "#picker-input")
    def _filter(self, event: Input.Changed) -> None:
        self._fill(event.value)

    @on(Input.Submitted, "#picker-input")
    def _submit(self) -> None:
        i = self.options.highlighted
        if i is not None and self.options.option_count:
            self.dismiss(self.options.get_option_at_index(i).id)

    @on(OptionList.OptionSelected, "#picker-options")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_move(self, delta: int) -> None:
        n = self.options.option_count
        if n:
            i = self.options.highlighted
            self.options.highlighted = min(max((i if i is not None else -1) + delta, 0), n - 1)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _label(src: SourceSnapshot) -> Text:
    s = src.summary
    t = Text(src.name, no_wrap=True, overflow="ellipsis")
    t.append(f"  {s.mean_accept_length:.2f}" if s.request_steps else "  —", style="bold")
    if src.findings:
        t.append(
            f"  {src.findings[0].code}", style="red" if src.findings[0].severity == "error" else "yellow"
        )
    return t
