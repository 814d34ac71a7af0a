"""Where each finding code is explained: one section per code in docs/findings.md."""

from __future__ import annotations

DOCS_PAGE = "docs/findings.md"


def docs_anchor(code: str) -> str:
    """The page and anchor of a code's section, as a Markdown renderer names it (the heading is
    the code itself, so the anchor is the code in lower case)."""
    return f"{DOCS_PAGE}#{code.lower()}"
