"""A real ``tokenizer.json`` for the toy engine's synthetic language (workload.py), so that the
monitor shows its tokens as words, the way it shows a served model's.

One word per id (a WordLevel model): the segment markers by name, the digits as digits, counting
tokens ``c20``..``c99``, grammar tokens ``g100``..``g255``. Regenerate the committed file with

    .venv/bin/python -m eagle3_top.hooks.toy.tokenizer
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .workload import (
    BOS,
    COPY,
    COUNT,
    COUNT_HI,
    COUNT_LO,
    DIGIT0,
    EQ,
    GRAM,
    GRAM_HI,
    GRAM_LO,
    MATH,
    PLUS,
    SEP,
    VOCAB_SIZE,
)

MARKERS = {
    BOS: "<bos>",
    COPY: "copy",
    SEP: "|",
    COUNT: "count",
    MATH: "math",
    PLUS: "+",
    EQ: "=",
    GRAM: "gram",
}
UNK = "<unk>"  # id 8: the language never uses it; a word outside the vocabulary encodes to it


def token_names() -> list[str]:
    """The word of each id, 0..VOCAB_SIZE-1."""
    names = [f"<unused{i}>" for i in range(VOCAB_SIZE)]
    for i, word in MARKERS.items():
        names[i] = word
    names[8] = UNK
    for d in range(10):
        names[DIGIT0 + d] = str(d)
    for i in range(COUNT_LO, COUNT_HI):
        names[i] = f"c{i}"
    for i in range(GRAM_LO, GRAM_HI):
        names[i] = f"g{i}"
    return names


def build_tokenizer() -> Any:
    """The toy language as a ``tokenizers.Tokenizer``: words split on whitespace, joined by it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {name: i for i, name in enumerate(token_names())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def write_tokenizer(model_dir: str) -> str:
    """Write ``tokenizer.json`` into ``model_dir``; its path."""
    path = os.path.join(model_dir, "tokenizer.json")
    build_tokenizer().save(path, pretty=True)
    return path


def main() -> int:
    from .paths import target_dir

    print(write_tokenizer(target_dir()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
