"""The full-size configs the matrix observes, one target (and its draft) per architecture with a
published EAGLE-3 draft (``ARCHITECTURES``): the published ``*-target.json`` / ``*-draft.json``
files of a config directory (``tests/data/published``), else transformers' config class defaults
with the published checkpoints' values where SGLang reads them (``PUBLISHED_OVERRIDES``), else a
config written by hand from the family's published shape (``HAND_WRITTEN``); and the default draft,
a SpecForge-style Llama EAGLE-3 draft."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from eagle3_top.hooks.sglang.observe.errors import NotObservable

# Architectures with published EAGLE-3 drafts (SpecForge / AQ-MedAI configs; Kimi K2 is DeepseekV3)
# and the transformers config class whose defaults stand in for a published config when the matrix
# runs without ``--config-dir``. None, or a class the installed transformers lacks (5.12.1, pinned by
# the 0.5.17-0.5.20 overlays, has no Kimi K2.5): the published config in ``PUBLISHED_DIR`` instead.
# The multimodal ones are None on every release: every release then observes the same config, and
# transformers' defaults are not a servable target (Gemma 4's have no vision config, Qwen3.5's no
# ``full_attention_interval``, which SGLang's model classes read: a crash that would be ours).
ARCHITECTURES: dict[str, str | None] = {
    "LlamaForCausalLM": "LlamaConfig",
    "Qwen2ForCausalLM": "Qwen2Config",
    "Qwen3ForCausalLM": "Qwen3Config",
    "Qwen3MoeForCausalLM": "Qwen3MoeConfig",
    "GptOssForCausalLM": "GptOssConfig",
    "DeepseekV3ForCausalLM": "DeepseekV3Config",
    "Llama4ForConditionalGeneration": "Llama4Config",
    "Qwen3NextForCausalLM": "Qwen3NextConfig",
    "Glm4MoeForCausalLM": "Glm4MoeConfig",
    "Gemma4ForConditionalGeneration": None,
    "KimiK25ForConditionalGeneration": None,
    "Qwen3_5MoeForConditionalGeneration": None,
    # SpecForge's other targets (its configs/), none with a published target config on disk: transformers'
    # class defaults with each named checkpoint's shape where SGLang reads it (``PUBLISHED_OVERRIDES``);
    # where transformers 5.12.1 has no class, a config written by hand (``HAND_WRITTEN``).
    "Phi3ForCausalLM": "Phi3Config",  # microsoft/phi-4
    "Gemma3ForCausalLM": "Gemma3TextConfig",  # google/gemma-3-1b-it (model_type gemma3_text)
    "DeepseekV2ForCausalLM": "DeepseekV2Config",  # deepseek-ai/DeepSeek-V2-Lite
    "Qwen2_5_VLForConditionalGeneration": "Qwen2_5_VLConfig",  # Qwen/Qwen2.5-VL-7B-Instruct
    "LongcatFlashForCausalLM": "LongcatFlashConfig",  # meituan-longcat/LongCat-Flash-Chat
    "BailingMoeV2ForCausalLM": None,  # inclusionAI/Ling-flash-2.0: HAND_WRITTEN
    "Step3p5ForCausalLM": None,  # stepfun-ai/Step-3.5-Flash: HAND_WRITTEN
}

# the published target/draft configs checked in beside the sources (absent from an installed wheel)
PUBLISHED_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "tests",
    "data",
    "published",
)


def _load(path: str) -> dict[str, Any]:
    with open(path) as f:
        d: dict[str, Any] = json.load(f)
    return d


# Where transformers' defaults differ from the published checkpoints in a way SGLang reads: keys
# transformers 5 no longer carries (DeepSeek-V3's routing, Qwen3-Next's attention interval), and
# DeepSeek-V3's (and Kimi K2's) YaRN rope scaling, the only one SGLang's off-CUDA DeepSeek rope takes.
_DEEPSEEK_YARN: dict[str, Any] = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
}
PUBLISHED_OVERRIDES: dict[str, dict[str, Any]] = {
    "DeepseekV3ForCausalLM": {
        "rope_parameters": _DEEPSEEK_YARN,
        "moe_layer_freq": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "ep_size": 1,
    },
    # keys transformers 5 dropped from its class that SGLang's Qwen3-Next reads
    "Qwen3NextForCausalLM": {"full_attention_interval": 4},
    # phi-4 is GQA (40 query heads, 10 KV heads); the class's defaults (Phi-3-mini) are MHA
    "Phi3ForCausalLM": {"num_attention_heads": 40, "num_key_value_heads": 10},
    # gemma-3-1b-it: one KV head (MQA) for its 4 query heads; the defaults (the 4B's text model) have 4 of 8
    "Gemma3ForCausalLM": {"num_attention_heads": 4, "num_key_value_heads": 1},
    # DeepSeek-V2-Lite: no q LoRA (q projected directly), 6 of 64 experts, one dense first layer, greedy
    # softmax routing over one group; the keys transformers 5 dropped (moe_layer_freq, scoring_func,
    # ep_size) and its YaRN rope scaling, as DeepSeek-V3's (the defaults leave num_experts_per_tok,
    # n_group, topk_group None: SGLang's router cannot be built from them)
    "DeepseekV2ForCausalLM": {
        "q_lora_rank": None,
        "num_experts_per_tok": 6,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "topk_method": "greedy",
        "scoring_func": "softmax",
        "ep_size": 1,
        "rope_parameters": {**_DEEPSEEK_YARN, "mscale": 0.707, "mscale_all_dim": 0.707},
    },
    # Qwen2.5-VL-7B's text model (the defaults are the 72B's) and its multimodal rope sections, which
    # SGLang's Qwen2.5-VL reads (``"mrope_section" in config.rope_scaling``); merged into text_config
    "Qwen2_5_VLForConditionalGeneration": {
        "text_config": {
            "hidden_size": 3584,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        },
    },
}

# Targets with no config class in transformers 5.12.1 (the 0.5.17-0.5.20 overlays') and none in SGLang
# that builds a servable target from its defaults: their config.json written by hand from the family's
# published shape (field names as the checkpoints spell them), so that every release observes the
# same config. Values SGLang does not read, or that the shrink replaces, are the published sizes.
# - Ling-flash-2.0 (BailingMoeV2ForCausalLM): its checkpoint ships its config class as remote code
#   (model_type ``bailing_moe``, ``configuration_bailing_moe_v2.py``), which no transformers and
#   no SGLang 0.5.17-0.5.20 has (0.5.21+ carries a ``bailing_moe_v2`` class for Ming, not this type);
#   ``REMOTE_CODE_CONFIGS`` registers a plain config class for the type instead, so the fields below
#   are what SGLang reads. From the Ling 2.0 family's published config (as SGLang's own Ling-mini-2.0
#   test shrinks it): 32 layers of 4096, 32 heads / 4 KV of 128, half-rotary, QK norm, 256 experts of
#   1024 (8 routed by sigmoid over 8 groups, top 4 groups, expert bias) + 1 shared, first layer dense.
# - Step-3.5-Flash (Step3p5ForCausalLM): SGLang's ``Step3p5Config`` defaults leave ``layer_types``,
#   the per-layer ``rope_theta`` / ``partial_rotary_factors`` / ``swiglu_limits`` lists and the
#   router switches unset (its model class indexes them: a crash that would be ours). From the
#   published shape: 45 layers of 4096 (+3 MTP entries in the per-layer lists), full / 3x sliding
#   (window 512) attention, 64 heads / 8 KV groups of 128 (96 heads on the sliding layers), a head-wise
#   attention gate, 288 experts of 1280 (top 8, sigmoid with router bias) + a shared expert of 1280 on
#   layers 3-44. Not published in what we could read: the SwiGLU clamp values (written 0: no clamp)
#   and the router's scaling factor (written 1.0); neither changes what a capture slot holds.
_STEP3P5_LAYER_TYPES = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"] * 12
HAND_WRITTEN: dict[str, dict[str, Any]] = {
    "BailingMoeV2ForCausalLM": {
        "architectures": ["BailingMoeV2ForCausalLM"],
        "model_type": "bailing_moe",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 9216,
        "moe_intermediate_size": 1024,
        "num_experts": 256,
        "num_shared_experts": 1,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "first_k_dense_replace": 1,
        "norm_topk_prob": True,
        "moe_router_enable_expert_bias": True,
        "routed_scaling_factor": 2.5,
        "score_function": "sigmoid",
        "router_dtype": "fp32",
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "partial_rotary_factor": 0.5,
        "use_qk_norm": True,
        "use_qkv_bias": False,
        "use_bias": False,
        "norm_head": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "embedding_dropout": 0.0,
        "attention_dropout": 0.0,
        "output_dropout": 0.0,
        "max_position_embeddings": 32768,
        "rope_theta": 600000.0,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 600000.0},
        "vocab_size": 157184,
        "tie_word_embeddings": False,
        "num_nextn_predict_layers": 1,
        "pad_token_id": 156892,
        "eos_token_id": 156892,
        "torch_dtype": "bfloat16",
    },
    "Step3p5ForCausalLM": {
        "architectures": ["Step3p5ForCausalLM"],
        "model_type": "step3p5",
        "num_hidden_layers": 45,
        "num_nextn_predict_layers": 3,
        "hidden_size": 4096,
        "intermediate_size": 11264,
        "num_attention_heads": 64,
        "num_attention_groups": 8,
        "head_dim": 128,
        "attention_other_setting": {"num_attention_heads": 96, "num_attention_groups": 8},
        "use_head_wise_attn_gate": True,
        "layer_types": _STEP3P5_LAYER_TYPES,
        "sliding_window": 512,
        "rope_theta": [5000000.0 if t == "full_attention" else 10000.0 for t in _STEP3P5_LAYER_TYPES],
        "partial_rotary_factors": [0.5 if t == "full_attention" else 1.0 for t in _STEP3P5_LAYER_TYPES],
        "yarn_only_types": [],
        "rope_scaling": None,
        "moe_layers_enum": ",".join(str(i) for i in range(3, 45)),
        "moe_num_experts": 288,
        "moe_top_k": 8,
        "moe_intermediate_size": 1280,
        "share_expert_dim": 1280,
        "moe_router_scaling_factor": 1.0,
        "use_moe_router_bias": True,
        "need_fp32_gate": True,
        "norm_expert_weight": True,
        "swiglu_limits": [0.0] * 48,
        "swiglu_limits_shared": [0.0] * 48,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 262144,
        "max_seq_len": 262144,
        "vocab_size": 128896,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": [1, 2, 128007],
        "torch_dtype": "bfloat16",
    },
}

# model_type -> the config class its checkpoints ship as remote code: a plain ``PretrainedConfig``
# keeping every field as written is registered for it (a real server loads the checkpoint's own
# class with ``--trust-remote-code``; SGLang reads the same fields).
REMOTE_CODE_CONFIGS = ("bailing_moe",)


_WHOLE = ("rope_parameters", "rope_scaling")  # replaced whole, never merged


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    """``over`` into ``base`` in place, dicts merged key by key (a sub-config keeps its other keys)."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict) and k not in _WHOLE:
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)


def base_config(arch: str) -> dict[str, Any] | None:
    """A full-size config of ``arch``: the one written by hand (``HAND_WRITTEN``), else from
    transformers' own config class (its defaults, with the published checkpoints' values where
    ``PUBLISHED_OVERRIDES`` says); None when ``ARCHITECTURES`` names no class or the installed
    transformers lacks it."""
    import transformers

    if arch in HAND_WRITTEN:
        return copy.deepcopy(HAND_WRITTEN[arch])
    name = ARCHITECTURES[arch]
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        return None
    d: dict[str, Any] = cls().to_dict()
    _merge(d, PUBLISHED_OVERRIDES.get(arch, {}))
    d["architectures"] = [arch]
    return d


def _base_source(arch: str) -> str:
    if arch in HAND_WRITTEN:
        return "hand-written config (observe.HAND_WRITTEN)"
    over = " + published overrides" if arch in PUBLISHED_OVERRIDES else ""
    return f"transformers {ARCHITECTURES[arch]}() defaults{over}"


# The published draft of a target whose own config is not on disk (by the draft file's family prefix)
DRAFT_FAMILIES: dict[str, str] = {"Step3p5ForCausalLM": "step3.5-"}


def _family_draft(arch: str, config_dir: str | None) -> tuple[dict[str, Any] | None, str]:
    prefix = DRAFT_FAMILIES.get(arch)
    if not prefix or not config_dir or not os.path.isdir(config_dir):
        return None, ""
    drafts = sorted(n for n in os.listdir(config_dir) if n.startswith(prefix) and n.endswith("-draft.json"))
    if not drafts:
        return None, ""
    return _load(os.path.join(config_dir, drafts[0])), f" + {drafts[0]}"


def matrix_config(arch: str, config_dir: str | None) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """``arch``'s target config, its draft config (or None) and where they came from: the first
    published ``*-target.json`` in ``config_dir`` (sorted by name) whose ``architectures[0]`` is
    ``arch`` and the ``*-draft.json`` of the same family prefix; else ``base_config`` (with the draft
    ``DRAFT_FAMILIES`` names, where one is published); else (no such transformers class) the
    published configs in ``PUBLISHED_DIR``. Raises
    ``NotObservable`` when none is found."""
    if not config_dir:
        base = base_config(arch)
        if base is not None:
            return base, None, _base_source(arch)
        config_dir = PUBLISHED_DIR if os.path.isdir(PUBLISHED_DIR) else None
    if config_dir:
        names = sorted(os.listdir(config_dir))
        for name in names:
            if not name.endswith("-target.json"):
                continue
            target = _load(os.path.join(config_dir, name))
            if (target.get("architectures") or [None])[0] != arch:
                continue
            family = name.split("-", 1)[0] + "-"
            drafts = [n for n in names if n.startswith(family) and n.endswith("-draft.json")]
            draft = _load(os.path.join(config_dir, drafts[0])) if drafts else None
            return target, draft, name + (f" + {drafts[0]}" if drafts else "")
    base = base_config(arch)
    if base is None:
        raise NotObservable(
            f"no config for {arch}: no published *-target.json and no transformers config class"
        )
    draft, named = _family_draft(arch, config_dir)
    return base, draft, _base_source(arch) + named


def default_draft_config() -> dict[str, Any]:
    """A SpecForge-style Llama EAGLE-3 draft config (one layer)."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 2048,
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
