"""The latest step's draft proposals: accepted path in green, rejected tokens in red; as text when
a tokenizer is known (tokenizer_shelf.py), else as ids."""

from __future__ import annotations

from rich.text import Text

from .fmt import short
from .snapshot import SourceSnapshot
from .text_panel import TextPanel
from .token_spans import append_drafts_and_bonus, token_piece
from .token_text import TokenText
from .tokenizer_shelf import TokenizerShelf

ROOT_WIDTH = 6  # ids up to six digits line up; a longer text piece pushes its row along


def render_proposals(
    src: SourceSnapshot | None, width: int, tokens: TokenText | None = None, note: str | None = None
) -> Text:
    """``note``: why ids are shown although a tokenizer was looked for (it failed, or is loading)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("latest proposals ", style="bold underline")
    if note:
        t.append(f"ids: {note} ", style="yellow")
    t.append("rid [accepted] root │ drafts (", style="dim")
    t.append("accepted", style="green")
    t.append(" / ", style="dim")
    t.append("rejected", style="red")
    t.append(") → bonus", style="dim")
    if src is None or not src.proposals:
        t.append("\nno steps yet", style="dim")
        return t
    roots = [token_piece(row.root, tokens) for row in src.proposals]
    root_width = max(ROOT_WIDTH, *(len(r) for r in roots))
    for row, root in zip(src.proposals, roots, strict=True):
        t.append("\n")
        t.append(f"{short(row.rid, 10):<10} ", style="cyan")
        t.append(f"[{row.accepted:>2}] ", style="dim")
        t.append(f"{root:>{root_width}} │", style="dim")
        append_drafts_and_bonus(t, row.proposals, row.accepted_mask, row.bonus, tokens)
    return t


class Proposals(TextPanel):
    def __init__(self, tokenizers: TokenizerShelf | None = None, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.tokenizers = tokenizers or TokenizerShelf()

    def update_from(self, src: SourceSnapshot | None) -> None:
        choice = self.tokenizers.for_hello(src.hello if src is not None else None)
        self.show(render_proposals(src, self.size.width or 100, choice.tokens, choice.note))
