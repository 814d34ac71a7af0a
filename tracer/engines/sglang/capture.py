"""SGLang's rules for turning a draft's layer ids into captured layers (canonical: the output of
0-based decoder block k; -1 the embedding output).

Every SGLang 0.5.17–0.5.23 target that implements ``set_eagle3_layers_to_capture`` captures at the
*input* of layer i (= output of block i - 1; the embedding output for i = 0), walking its layers
once in ascending order: an out-of-order id list reorders the slots against training, a duplicate
or an id the loop never reaches yields fewer slots than the draft's fc expects. What differs per
architecture family is how the draft's ids become that native list:

- llama-style (Llama and subclasses, Qwen2/3, Qwen MoE, GLM4-MoE, Gemma3/4, MiniMax, ..., and the
  built-in engine): ``id + 1`` for every id, the list kept as given.
- deepseek-style (``deepseek_v2``: DeepSeek V2/V3, Kimi K2.x through ``kimi_k25``; and
  ``glm4_moe_lite``): ``+1`` only when the first id is exactly 1, otherwise used as given. Its
  fixed-size packer makes a -1, a duplicate or an unreachable id fail at the first forward.
- gpt-oss: ``+1`` unless ``max(ids) == num_layers`` (then ids are boundary indices, boundary n =
  after the last block).
- llama-style with a tail (Gemma 3/4): ``id + 1`` as Llama, and native n (canonical n - 1, the last
  block's output) is captured after the loop.

With no ids read (none in ``eagle_config``, or any error reading them) SGLang captures its default
``[2, n//2, n-3]`` native = ``[1, n//2 - 1, n - 4]`` canonical, which is SpecForge's default too.
Where a live model is at hand, pass what it holds (``tracer.serving.wiring.live_capture``); these
rules re-derive only what an offline check needs. ``tests/test_sglang_wiring.py`` holds them against
each release's own ``set_eagle3_layers_to_capture``, and the observed matrix (``defects``) against its
forward loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LLAMA = "llama"
LLAMA_TAIL = "llama_tail"
DEEPSEEK = "deepseek"
GPT_OSS = "gpt_oss"

CONVENTIONS = {
    LLAMA: "sglang llama-style: native = id + 1 (input of layer i), canonical = i - 1, ascending, once per layer",
    LLAMA_TAIL: (
        "sglang llama-style with a tail capture: native = id + 1 (input of layer i; i = n: after the last "
        "layer), canonical = i - 1, ascending, once per layer"
    ),
    DEEPSEEK: (
        "sglang deepseek-style: native = id + 1 only if the first id is 1, else id as given; "
        "canonical = i - 1, ascending, once per layer; fewer slots than ids fails at first forward"
    ),
    GPT_OSS: (
        "sglang gpt-oss: native = id + 1 unless max(id) == n (boundary indices); "
        "canonical = i - 1 (boundary n = output of the last block), ascending, once"
    ),
}

_DEEPSEEK_MODULES = ("deepseek_v2", "kimi_k25", "glm4_moe_lite", "kimi_k25_eagle3")
_LLAMA_MODULES = ("llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
# their forward loop also captures after the last layer (``num_layers in layers_to_capture``)
_TAIL_MODULES = ("gemma3_causal", "gemma4_causal", "gemma3_mm", "gemma4_mm", "laguna")
_TAIL_ARCHS = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma4ForCausalLM",
               "Gemma4ForConditionalGeneration")  # fmt: skip
_DEEPSEEK_ARCHS = (
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "Glm4MoeLiteForCausalLM",
)


def family_of(model: Any = None, arch: str | None = None) -> str:
    """Which id rule applies: from the live model's class module, else the HF architecture name."""
    if model is not None:
        for cls in type(model).__mro__:
            leaf = (getattr(cls, "__module__", "") or "").rsplit(".", 1)[-1]
            if leaf in _DEEPSEEK_MODULES:
                return DEEPSEEK
            if leaf == "gpt_oss":
                return GPT_OSS
            if leaf in _TAIL_MODULES:
                return LLAMA_TAIL
            if leaf in _LLAMA_MODULES:
                return LLAMA
    if arch:
        if arch in _DEEPSEEK_ARCHS or arch.startswith("Deepseek"):
            return DEEPSEEK
        if arch.startswith("GptOss"):
            return GPT_OSS
        if arch in _TAIL_ARCHS:
            return LLAMA_TAIL
    return LLAMA


def default_native(num_layers: int) -> list[int]:
    """SGLang's default ``layers_to_capture`` when no ids were read: ``[2, n//2, n-3]``."""
    return [2, num_layers // 2, num_layers - 3]


def native_from_ids(family: str, ids: Sequence[int] | None, num_layers: int) -> list[int]:
    """What ``set_eagle3_layers_to_capture(ids)`` stores, per family (for offline checks)."""
    if ids is None:
        return default_native(num_layers)
    ids = [int(v) for v in ids]
    if family == DEEPSEEK:
        return [v + 1 for v in ids] if ids and ids[0] == 1 else list(ids)
    if family == GPT_OSS:
        return list(ids) if ids and max(ids) == num_layers else [v + 1 for v in ids]
    return [v + 1 for v in ids]


def captured_native(family: str, native: Sequence[int], num_layers: int) -> list[int]:
    """Native layers really captured, in slot order: ascending, once, inside the loop."""
    top = num_layers if family in (GPT_OSS, LLAMA_TAIL) else num_layers - 1
    return sorted({int(i) for i in native if 0 <= int(i) <= top})


def canonical_from_native(family: str, native: Sequence[int], num_layers: int) -> list[int]:
    """Canonical ids of the slots the target really produces, in concatenation order."""
    return [i - 1 for i in captured_native(family, native, num_layers)]


def capture_failure(family: str, native: Sequence[int], num_layers: int) -> str | None:
    """A note when the live capture list cannot fill the slots the target allocates."""
    slots = len(captured_native(family, native, num_layers))
    if family == DEEPSEEK and slots != len(native):
        return f"deepseek-style packer expects {len(native)} captures, the loop produces {slots}: first forward fails"
    return None
