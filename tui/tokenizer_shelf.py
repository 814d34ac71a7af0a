"""Which tokenizer draws a source's tokens: the one the user gave (``--tokenizer``), else the
``tokenizer.json`` in the model directory its hello names, when that directory is on this machine.

A model's tokenizer takes a second or so to read, so the monitor reads it on a thread of its own
and shows ids meanwhile. Each path is tried once; a path that is not here (the monitor runs on a
laptop, the model on the GPU box) is silent: ids are shown, as they would be without a tokenizer.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from eagle3_top.tracer.schema import Hello

from .token_text import TOKENIZER_FILE, TokenizerError, TokenText

MAX_PATHS = 16  # model paths tried per monitor; a publisher inventing paths gets no more
MAX_PATH_CHARS = 4096


@dataclass(frozen=True)
class TokenChoice:
    tokens: TokenText | None  # None: ids are shown
    note: str | None = None  # why ids are shown, when there is something to say


_LOADING = TokenChoice(None, "reading the tokenizer…")
_NONE = TokenChoice(None)


class TokenizerShelf:
    """The tokenizers in use, one per model path, read once. ``background=False`` reads them at
    once, for a command that prints and exits."""

    def __init__(self, given: TokenText | None = None, *, background: bool = True) -> None:
        self.given = given
        self._background = background
        self._lock = threading.Lock()
        self._by_path: dict[str, TokenChoice] = {}

    def for_hello(self, hello: Hello | None) -> TokenChoice:
        if self.given is not None:
            return TokenChoice(self.given)
        path = hello.model.target_path if hello is not None and hello.model is not None else None
        if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
            return _NONE
        with self._lock:
            known = self._by_path.get(path)
            if known is not None:
                return known
            if len(self._by_path) >= MAX_PATHS:
                return _NONE
            self._by_path[path] = _LOADING
        if not self._background:
            self._read(path)
            return self._by_path[path]
        threading.Thread(target=self._read, args=(path,), name="tokenizer-read", daemon=True).start()
        return _LOADING

    def _read(self, path: str) -> None:
        choice = _NONE
        try:
            if os.path.isfile(os.path.join(path, TOKENIZER_FILE)):
                choice = TokenChoice(TokenText.load(path))
        except TokenizerError as exc:
            choice = TokenChoice(None, str(exc))
        except (OSError, ValueError):  # unreadable, or a NUL in a path from the wire: as if absent
            pass
        with self._lock:
            self._by_path[path] = choice
