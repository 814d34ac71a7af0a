"""Wire strings made safe to draw or print: the stream comes from processes we do not control, and
a terminal obeys escape sequences (an OSC retitles it, a CSI clears it). Every control character,
C0 and C1, and every bidirectional override is written visibly as ``\\xNN`` / ``\\uNNNN``, so what a
hostile publisher sent stays readable in a bug report and can do nothing to the terminal."""

from __future__ import annotations

import re
from typing import Any

MAX_TEXT = 512  # longer wire strings are cut: no field of ours needs more

# C0 (but not the space), DEL, C1, the line and paragraph separators, and the bidi embeddings,
# overrides and isolates (a "Trojan Source" string reads differently from what it holds).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(s: Any, limit: int = MAX_TEXT) -> str:
    """``s`` as a single line a terminal can show as is: unsafe characters escaped, at most
    ``limit`` characters (an ellipsis says it was cut)."""
    text = s if isinstance(s, str) else str(s)
    if len(text) <= limit and text.isprintable():  # the common case, at C speed
        return text
    if len(text) > limit * 4:
        text = text[: limit * 4]  # the escaping below is linear, but no need to scan a megabyte
    if _UNSAFE.search(text) is not None:
        text = _UNSAFE.sub(_escape, text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_printable(s: str) -> bool:
    return _UNSAFE.search(s) is None
