"""Tokens drawn into a rich ``Text``: as text when a tokenizer is known, else as ids; the accepted
ones in green, the rejected ones in red. Shared by every panel that shows tokens."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from .token_text import TokenText

ACCEPTED_STYLE = "green"
REJECTED_STYLE = "red dim"


def token_piece(token_id: int, tokens: TokenText | None) -> str:
    """One token as shown: its text with a tokenizer, else its id."""
    return str(token_id) if tokens is None else tokens.piece(token_id)


def append_tokens(
    text: Text,
    ids: Sequence[int],
    accepted_mask: Sequence[bool],
    tokens: TokenText | None,
    *,
    accepted_style: str = ACCEPTED_STYLE,
    rejected_style: str = REJECTED_STYLE,
) -> Text:
    """Append each token after a space, styled by whether it was accepted; returns ``text``.
    Pieces show their own spaces as signs, so the plain space between them always separates."""
    for tok, ok in zip(ids, accepted_mask, strict=False):
        text.append(" ")
        text.append(token_piece(tok, tokens), style=accepted_style if ok else rejected_style)
    return text


def append_drafts_and_bonus(
    text: Text,
    proposals: Sequence[int],
    accepted_mask: Sequence[bool],
    bonus: int | None,
    tokens: TokenText | None,
) -> Text:
    """A step's drafts (accepted path green, rejected red), then ``→ bonus``: one row's tail in the
    proposals panel and in a request's timeline alike."""
    append_tokens(text, proposals, accepted_mask, tokens)
    if bonus is not None:
        text.append(f" → {token_piece(bonus, tokens)}", style="bold")
    return text


def marked_tokens(ids: Sequence[int], accepted_mask: Sequence[bool], tokens: TokenText | None) -> str:
    """The same tokens for plain text, where there is no colour: a rejected one is marked ✗."""
    return " ".join(
        ("" if ok else "✗") + token_piece(tok, tokens) for tok, ok in zip(ids, accepted_mask, strict=False)
    )
