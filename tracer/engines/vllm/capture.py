"""vLLM's capture rule (0.32): the target records ``hidden_states + residual`` at native point k =
the **input of layer k** (``EagleModelMixin._maybe_add_hidden_state``: k = 0 before the first layer,
the embedding output; k = idx + 1 after layer idx, up to k = n after the last one). No ``+ 1`` is
added to the draft's ids, so native k is canonical k - 1, and a draft written in SGLang's convention
(canonical ids, SpecForge's) is served **one layer early**. ``set_aux_hidden_state_layers`` stores
``sorted(set(ids))`` (DeepSeek-V2/V3 and Kimi store the ids as given, but their loop captures in
ascending order too): slots come out ascending, a duplicate is captured once, and an id outside
``[0, n]`` (-1 included) is never reached, so the draft's ``fc`` gets fewer slots than it expects and
vLLM fails at the first request (``combine_hidden_states``) while ``/health`` says ready.

With no ids read vLLM captures ``(2, n//2, n-3)`` native (``get_eagle3_default_aux_hidden_state_layers``),
canonical ``[1, n//2 - 1, n - 4]``: the same layers as SGLang's and SpecForge's default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FAMILY = "vllm"
CONVENTION = (
    "vllm: native = id (input of layer id: 0 the embedding output, n the last block's output), "
    "canonical = id - 1, sorted and de-duplicated, once per layer"
)


def family_of(model: Any = None, arch: str | None = None) -> str:
    """One rule for every vLLM 0.32 target that supports EAGLE-3."""
    return FAMILY


def default_native(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]


def native_from_ids(ids: Sequence[int] | None, num_layers: int) -> list[int]:
    """What ``set_aux_hidden_state_layers`` stores: ``sorted(set(ids))``, or the default."""
    if ids is None:
        return default_native(num_layers)
    return sorted({int(v) for v in ids})


def captured_native(native: Sequence[int], num_layers: int) -> list[int]:
    return sorted({int(k) for k in native if 0 <= int(k) <= num_layers})


def capture_failure(native: Sequence[int], num_layers: int) -> str | None:
    got = captured_native(native, num_layers)
    missed = [int(k) for k in native if not 0 <= int(k) <= num_layers]
    if not missed:
        return None
    return (
        f"vLLM never reaches id{'s' if len(missed) > 1 else ''} {', '.join(map(str, missed))} "
        f"(its ids run 0..{num_layers}, 0 the embedding): {len(got)} slots for a {len(native)}-slot "
        "draft; the engine fails at the first request (combine_hidden_states) though /health says ready"
    )
