"""One layer convention: "output of 0-based decoder block k; -1 is the embedding output".

Engines disagree on what a layer id means (DESIGN.md §4). These helpers turn what an engine really
holds into the canonical convention. Where a live model is at hand, pass what it holds; do not
re-derive it from config files.
"""

from __future__ import annotations

from collections.abc import Sequence

LLAMA_CONVENTION = (
    "llama-style: capture at the input of layer i, canonical = i - 1, ascending, once per layer"
)


def captured_input_layers(layers_to_capture: Sequence[int], num_layers: int) -> list[int]:
    """The layers whose *input* a Llama-style forward loop really captures, in slot order.

    The loop walks layers 0..n-1 once and tests ``i in layers_to_capture``: so slots come out in
    ascending order, a duplicate id is captured once, and an index outside the loop never is.
    """
    return sorted({i for i in layers_to_capture if 0 <= i < num_layers})


def input_layers_to_canonical(layers: Sequence[int]) -> list[int]:
    """Input of layer i is the output of block i - 1 (the embedding output for i = 0)."""
    return [i - 1 for i in layers]


def sglang_default_capture(num_layers: int) -> list[int]:
    """SGLang's default ``layers_to_capture`` when no ids were read: ``[2, n//2, n-3]`` (native)."""
    return [2, num_layers // 2, num_layers - 3]


def llama_native_from_ids(ids: Sequence[int] | None, num_layers: int) -> list[int]:
    """``set_eagle3_layers_to_capture`` for Llama/Qwen-style models: +1 on every id, kept as given."""
    if ids is None:
        return sglang_default_capture(num_layers)
    return [int(v) + 1 for v in ids]


def canonical_slots(layers_to_capture: Sequence[int], num_layers: int) -> list[int]:
    """Canonical ids of the slots a Llama-style target really produces, in concatenation order."""
    return input_layers_to_canonical(captured_input_layers(layers_to_capture, num_layers))
