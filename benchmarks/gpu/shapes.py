"""Real-shape EAGLE-3 pairs for SGLang's ``--load-format dummy``: config files only, no weights.

usage: shapes.py OUTDIR SHAPE...     SHAPE: llama8b, kimi-wide, wide-llama

Writes OUTDIR/SHAPE/target/config.json and OUTDIR/SHAPE/draft/config.json from the published configs
in tests/data/published (SOURCES.md there) and prints one JSON line per shape: what a client and the
tracer's checks need (vocab for prompt ids, hidden, aux width = 3 x hidden, the ids written, the
capture SGLang 0.5.17 will make of them). Needs nothing but the standard library: it runs on the
device before SGLang is unpacked.

- llama8b: Llama-3.1-8B (32 layers) and SpecForge's draft, both as published.
- kimi-wide: Kimi-K2's target (DeepSeek-V3 architecture, hidden 7168, MLA) cut to ``KIMI_LAYERS``
  dense layers, and AQ-MedAI's draft (fc input 21504) with ids that exist in the cut target.
- wide-llama: the fallback if the MLA path fails on the GPU: a Llama target of the same width
  (the Kimi draft's heads and MLP), ``WIDE_LLAMA_LAYERS`` layers, Kimi's vocabulary; the same draft.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

PUBLISHED = Path(__file__).resolve().parents[2] / "tests" / "data" / "published"
LLAMA8B_TARGET = "llama3.1-Meta-Llama-3.1-8B-target.json"
LLAMA8B_DRAFT = "llama3.1-Llama-3.1-8B-Instruct-specforge-draft.json"
KIMI_TARGET = "kimik2-Kimi-K2-Instruct-target.json"
KIMI_DRAFT = "kimik2-Kimi-K2-Instruct-AQ-MedAI-draft.json"

# 8 dense layers of 7168 (~0.5 B parameters each) + embedding and head (2 x 1.17 B): ~13 GB of bf16,
# the draft ~5 GB: room on an 80 GB card for a KV pool and CUDA graphs up to batch 64. 8 (not 4) so
# that SGLang's own default rule [2, n // 2, n - 3] gives three distinct layers (see kimi_ids).
KIMI_LAYERS = 8
WIDE_LLAMA_LAYERS = 4
AUX_SLOTS = 3  # EAGLE-3 captures three target layers: the draft's fc input is 3 x hidden


def _load(name: str) -> dict[str, Any]:
    with open(PUBLISHED / name) as f:
        d: dict[str, Any] = json.load(f)
    return d


def _set_ids(draft: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    d = copy.deepcopy(draft)
    d.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = ids
    d["eagle_config"]["use_aux_hidden_state"] = True
    return d


def kimi_ids(n_layers: int) -> list[int]:
    """AQ-MedAI's published ids [2, 30, 58] are exactly SGLang's (and SpecForge's) default native
    capture [2, n // 2, n - 3] for Kimi's 61 layers: the same rule at the cut depth. DeepSeek's
    ``set_eagle3_layers_to_capture`` uses ids as given unless the first is 1, so these are native
    ids: inputs of layers 2, n // 2, n - 3 (canonical: outputs of blocks 1, n // 2 - 1, n - 4)."""
    ids = [2, n_layers // 2, n_layers - 3]
    if len(set(ids)) != len(ids) or ids != sorted(ids) or ids[-1] >= n_layers:
        raise ValueError(f"{n_layers} layers: default ids {ids} are not three distinct reachable layers")
    return ids


def wide_llama_ids(n_layers: int) -> list[int]:
    """Llama captures native id + 1 (the input of layer id + 1) for layers 1..n-1 only: at 4 layers
    the default rule collapses ([2, 2, 1]), so take the last three reachable boundaries, the
    outputs of blocks n - 4 .. n - 2 (canonical ids [0, 1, 2] at 4 layers)."""
    return [n_layers - 4, n_layers - 3, n_layers - 2]


def llama8b() -> tuple[dict[str, Any], dict[str, Any]]:
    return _load(LLAMA8B_TARGET), _load(LLAMA8B_DRAFT)


def kimi_wide(n_layers: int = KIMI_LAYERS) -> tuple[dict[str, Any], dict[str, Any]]:
    t = _load(KIMI_TARGET)
    t["num_hidden_layers"] = n_layers
    # fp8 block quantization needs kernels the carried SGLang set may lack; dummy weights are bf16
    t.pop("quantization_config", None)
    # deepseek_v2.py's _is_layer_sparse: MoE only where layer_id >= first_k_dense_replace, so every
    # layer is dense (no fused-MoE kernels, no 384-expert weights); the expert fields stay as
    # published (the model reads n_routed_experts elsewhere: shared-expert fusion, disabled here)
    t["first_k_dense_replace"] = n_layers
    # transformers has no "kimi_k2" config type and auto_map points at remote code we do not have;
    # the architecture is DeepseekV3ForCausalLM, whose config class transformers carries
    t["model_type"] = "deepseek_v3"
    t.pop("auto_map", None)
    return t, _set_ids(_load(KIMI_DRAFT), kimi_ids(n_layers))


def wide_llama(n_layers: int = WIDE_LLAMA_LAYERS) -> tuple[dict[str, Any], dict[str, Any]]:
    draft = _load(KIMI_DRAFT)
    t = _load(LLAMA8B_TARGET)
    t.pop("rope_scaling", None)  # Llama-3.1's long-context rope is tied to its own 4096-wide training
    # the Kimi draft's own (Llama-style) layer shape: 64 heads and 64 KV heads of 128, MLP 18432
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "head_dim", "rms_norm_eps", "rope_theta", "vocab_size", "bos_token_id", "eos_token_id"):  # fmt: skip
        t[key] = draft[key]
    t["num_hidden_layers"] = n_layers
    t["torch_dtype"] = "bfloat16"
    return t, _set_ids(draft, wide_llama_ids(n_layers))


SHAPES = {"llama8b": llama8b, "kimi-wide": kimi_wide, "wide-llama": wide_llama}


def capture(target: dict[str, Any], ids: list[int]) -> dict[str, list[int]]:
    """SGLang 0.5.17's rule for these two families (tracer/engines/sglang/capture.py has them all):
    native = the layer whose input is captured; canonical = native - 1 (the block whose output)."""
    deepseek = target["architectures"][0].startswith("Deepseek")
    native = list(ids) if deepseek and ids[0] != 1 else [i + 1 for i in ids]
    return {"native": native, "canonical": [i - 1 for i in native]}


def write(out: Path, shape: str) -> dict[str, Any]:
    target, draft = SHAPES[shape]()
    for part, cfg in (("target", target), ("draft", draft)):
        (out / shape / part).mkdir(parents=True, exist_ok=True)
        with open(out / shape / part / "config.json", "w") as f:
            json.dump(cfg, f, indent=2)
    ids = list(draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) if "eagle_config" in draft else None
    n = int(target["num_hidden_layers"])
    hidden = int(target["hidden_size"])
    return {
        "shape": shape,
        "dir": str(out / shape),
        "architecture": target["architectures"][0],
        "vocab": int(target["vocab_size"]),
        "draft_vocab": int(draft.get("draft_vocab_size") or draft["vocab_size"]),
        "hidden": hidden,
        "aux_width": AUX_SLOTS * hidden,
        "num_layers": n,
        # SpecForge's llama draft carries no ids: SGLang captures its default [2, n // 2, n - 3] native
        "ids": ids,
        "capture": capture(target, ids) if ids is not None else {
            "native": [2, n // 2, n - 3], "canonical": [1, n // 2 - 1, n - 4]},
    }  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any(s not in SHAPES for s in argv[1:]):
        print(f"usage: shapes.py OUTDIR SHAPE...  (SHAPE: {', '.join(SHAPES)})", file=sys.stderr)
        return 2
    for shape in argv[1:]:
        print(json.dumps(write(Path(argv[0]), shape)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
