"""Token ids as short display text, read from a Hugging Face ``tokenizer.json``.

The file is parsed by the ``tokenizers`` library (``Tokenizer.from_file``: JSON, no pickle, no
network). Each id is decoded on its own, once, and kept in a bounded cache: the proposals panel
asks for the same few dozen ids four times a second. What a piece holds is made visible: a space,
a newline or a tab would otherwise vanish between the tokens around it, and a control character
in a file we did not write must not reach the terminal.
"""

from __future__ import annotations

import os
import re
import unicodedata
from functools import lru_cache
from typing import Any

from eagle3_top.tracer.files import open_regular
from eagle3_top.tracer.schema.text import printable

TOKENIZER_FILE = "tokenizer.json"
INSTALL_HINT = "install eagle3-top[text]"
MAX_PIECE = 12  # characters a piece is cut to: a line shows a dozen proposals
CACHE_SIZE = 8192  # decoded ids kept per tokenizer; the oldest go first

_VISIBLE = {" ": "·", "\n": "⏎", "\t": "⇥", "\r": "␍"}
# Control, format (bidi overrides among them), separator, surrogate, private and unassigned
# characters: written as escapes, never drawn.
_HIDDEN = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"))
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenizerError(Exception):
    """A tokenizer could not be read; the message is the one line the user gets."""


MAX_TOKENIZER_BYTES = 256 << 20  # the largest published tokenizer.json is a few tens of MB


def tokenizer_file(path: str) -> str:
    """The ``tokenizer.json`` that ``path`` names: the file itself, or the one in that directory; a
    regular file of bounded size (the tokenizers library would read a FIFO or a device forever)."""
    try:
        file = os.path.join(path, TOKENIZER_FILE) if os.path.isdir(path) else path
    except ValueError:  # a NUL in the path
        raise TokenizerError(f"{path!r}: not a file name") from None
    try:
        open_regular(file, MAX_TOKENIZER_BYTES).close()
    except FileNotFoundError:
        if file != path:
            raise TokenizerError(f"{path}: no {TOKENIZER_FILE} in this directory") from None
        raise TokenizerError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise TokenizerError(f"{file}: {exc.strerror or exc}") from None
    return file


class TokenText:
    """One tokenizer, turning ids into display pieces (see ``piece``)."""

    def __init__(self, tokenizer: Any, path: str) -> None:
        self.path = path
        self._tok = tokenizer
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        self._cache: dict[int, str] = {}

    @classmethod
    def load(cls, path: str) -> TokenText:
        """Read ``path`` (a tokenizer.json, or a model directory holding one); ``TokenizerError``
        with one line when it is missing, is no tokenizer, or the library is not installed."""
        file = tokenizer_file(path)
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError(
                f"{path}: showing tokens as text needs the tokenizers library ({INSTALL_HINT})"
            ) from None
        try:
            tok = Tokenizer.from_file(file)
        except Exception as exc:  # the library raises plain Exceptions with serde's message
            why = printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 160)
            raise TokenizerError(f"{file}: not a tokenizer.json ({why})") from None
        return cls(tok, file)

    def piece(self, token_id: int) -> str:
        """The token as it would read in the output, whitespace and controls made visible, at most
        ``MAX_PIECE`` characters; ``<id>`` for an id outside the vocabulary."""
        got = self._cache.get(token_id)
        if got is None:
            got = self._decode(token_id)
            if len(self._cache) >= CACHE_SIZE:
                del self._cache[next(iter(self._cache))]
            self._cache[token_id] = got
        return got

    def _decode(self, token_id: int) -> str:
        if not 0 <= token_id < self.vocab_size:
            return f"<{token_id}>"
        raw = self._tok.id_to_token(token_id)
        if raw is None:
            return f"<{token_id}>"
        try:
            text = self._tok.decode([token_id], skip_special_tokens=False)
        except Exception:
            text = raw
        if "\ufffd" in text:  # one byte of a multi-byte character: show the byte, not a �
            text = _bytes_of(raw) or text
        elif raw.startswith("▁") and not text.startswith(" "):
            # a SentencePiece decoder drops the word's leading space on the first token
            text = " " + text
        return visible(text)


def visible(text: str, limit: int = MAX_PIECE) -> str:
    """``text`` with its whitespace and controls drawn as signs, cut to ``limit`` characters."""
    if not text:
        return "∅"
    out = []
    for ch in text:
        sign = _VISIBLE.get(ch)
        if sign is None:
            if unicodedata.category(ch) in _HIDDEN:
                c = ord(ch)
                sign = chr(0x2400 + c) if c < 0x20 else f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
            elif ch.isspace():  # no-break and other wide spaces
                sign = "␣"
            else:
                sign = ch
        out.append(sign)
    shown = "".join(out)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _bytes_of(raw: str) -> str | None:
    """The byte a byte-level token stands for, as ``\\xNN``: ``<0xE2>`` (SentencePiece byte
    fallback), or GPT-2's byte-to-character alphabet (``â`` is 0xE2)."""
    m = _BYTE_FALLBACK.fullmatch(raw)
    if m:
        return f"\\x{m.group(1).lower()}"
    table = _gpt2_bytes()
    if raw and all(ch in table for ch in raw):
        data = bytes(table[ch] for ch in raw)
        return data.decode("utf-8", errors="backslashreplace")
    return None


@lru_cache(maxsize=1)
def _gpt2_bytes() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character to byte: printable Latin-1 bytes stand for
    themselves, the others are shifted past 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in keep}
    n = 0
    for b in range(256):
        if b not in keep:
            table[chr(256 + n)] = b
            n += 1
    return table
