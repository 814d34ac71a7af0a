"""The built-in engine (``eagle3-top toy``): it serves by SGLang's rules for Llama-style targets
(ids read only from ``eagle_config``, capture at the input of layer ``id + 1``, the ``topk == 1``
rewrite) and has no release defects of its own."""

from __future__ import annotations

from collections.abc import Sequence

from eagle3_top.tracer.engines.base import KnownDefect, Version
from eagle3_top.tracer.engines.sglang.engine import SGLang


class Toy(SGLang):
    name = "toy"
    title = "the built-in engine"
    supported: tuple[Version, Version] | None = None
    observer: str | None = None  # it is its own reference: the hello is read from the live engine

    def known_defects(
        self, version: str | None, arch: str | None, ids: Sequence[int] | None, num_layers: int | None
    ) -> list[KnownDefect]:
        return []

    def defects_coverage(self, version: str | None, arch: str | None) -> str | None:
        return None


ENGINE = Toy()

__all__ = ["ENGINE", "Toy"]
