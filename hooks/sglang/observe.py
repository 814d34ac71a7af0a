"""Observe, on a CPU, what the INSTALLED SGLang release really captures for an EAGLE-3 draft.

For a target architecture and a draft config, each case writes the draft's layer ids one way
(``CASES``), and this runs that release's real code on a tiny copy of the target (8 layers, hidden
64, vocab 256; the architecture and its structural switches kept): ServerArgs from a launcher
command line (``prepare_server_args``), the ids SGLang reads (``resolve_spec_aux_hidden_state_config``),
the target class as the model registry resolves ``architectures[0]`` (``_initialize_model``), random
weights (seeded normal, never zeros), the capture set as the model runner sets it
(``configure_aux_hidden_state_capture`` -> ``set_eagle3_layers_to_capture``), and one bfloat16
prefill (EXTEND) of a 7-token prompt through the decoder stack's own ``forward`` (the loop that
captures), with the norm and activation ops on their CUDA path (``cpu_kernels`` says exactly what
is real SGLang code and what is emulated; ``--native-path`` is the control without it).

Each returned aux slot is compared with references recorded by forward hooks during the same
forward (clones taken at hook time): the embedding output (canonical -1) and each decoder block k's
output stream (canonical k: ``hidden + residual`` for a block returning the pair; for 0.5.22+'s
boundary stages, the block's output completed with the residual its stream holds). A slot
``holds`` the reference it equals (else null), and ``shares_storage_with_later_modified`` says its
memory was written in place after the phase (embedding, block k, final norm) that produced it:
what the aliasing defect looks like. A crash at setup or in the forward is a result, recorded.

Whose error is it? The table trusts every error that does not start with ``not observable on CPU:``
as SGLang's, so:

- **SGLang's** (recorded as they come): everything from reading the draft's ids
  (``resolve_spec_aux_hidden_state_config``) on: building the target class, its post-load steps,
  ``set_eagle3_layers_to_capture``, the forward; and ``no model class: ...`` when the release's model
  registry does not know the architecture (checked first; the release's source is searched, so a
  class defined there but failing to import HERE is not mistaken for a missing one).
- **Ours** (``not observable on CPU: eagle3-top's harness failed at <step> ...``): any exception before
  SGLang's model code runs: finding the architecture's config, shrinking it, the shrunk draft
  config, ServerArgs from our launcher flags (SGLang's CPU platform checks fire there),
  ``ModelConfig`` of the shrunk target (a shrink inconsistency surfaces there), the attention
  data-parallel setup. A crash there on a GPU with the real config may exist; it is not observed.
- **Ours, later** (``not observable on CPU: <why>``): an error raised inside the observer or the
  emulation, by a stand-in of a GPU-only package, by an un-emulated Triton launch or CUDA-only call,
  or by an SGLang CPU fallback refusing what the GPU kernel does (``NotImplementedError``).

    python -m eagle3_top.hooks.sglang.observe --target-config T.json --draft-config D.json [--case NAME ...]
    python -m eagle3_top.hooks.sglang.observe --matrix [--config-dir tests/data/published]

JSON on stdout (a list of case results), progress on stderr. Per case: ``ids`` as written,
``ids_read`` by SGLang (null: none read, the target's default used), ``native`` (the capture list
as stored) and ``flagged`` (``_is_layer_to_capture`` flags, where the model keeps them), errors with
``error_at`` (the innermost SGLang frame), and per returned slot ``holds`` (canonical id, or null),
``intended`` (the id written, or SpecForge's default ``[1, n/2-1, n-4]`` when none is),
``max_abs_diff_to_intended`` and ``shares_storage_with_later_modified``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import inspect
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from eagle3_top.tracer.engines.sglang import defects

N_LAYERS = defects.NUM_LAYERS
HIDDEN = 64
HEADS = 4
HEAD_DIM = 16
VOCAB = 256
DRAFT_VOCAB = 64
PROMPT_LEN = 7
SEED = 0
# what SGLang serves in (its CUDA RMSNorm has no float32 kernel; Llama 4 hardcodes bfloat16 off CUDA)
DTYPE = "bfloat16"
# a slot "holds" a reference within this fraction of the reference's largest magnitude
HOLDS_TOLERANCE = 0.01

# canonical ids as a draft config writes them (8 layers)
# The cases, as ``tracer/engines/sglang/defects.py`` defines them (one list for the observer and the
# table that reads its results): ids nested in eagle_config, or at the top level where SGLang does not look.
CASES: dict[str, dict[str, Any]] = {
    name: ({"top": ids} if name in defects.TOP_LEVEL else {"nested": ids})
    for name, ids in defects.CASES.items()
}

# What a draft trained without ids was trained on (SpecForge's default): canonical [1, n/2-1, n-4].
DEFAULT_TRAINED = [1, N_LAYERS // 2 - 1, N_LAYERS - 4]

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
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "data", "published"
)

NOT_OBSERVABLE = "not observable on CPU: "


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- configs -----------------------------------------------------------------------------------------


# Where transformers' defaults differ from the published checkpoints in a way SGLang reads: keys
# transformers 5 no longer carries (DeepSeek-V3's routing, Qwen3-Next's attention interval), and
# DeepSeek-V3's (and Kimi K2's) YaRN rope scaling, the only one SGLang's off-CUDA DeepSeek rope takes.
PUBLISHED_OVERRIDES: dict[str, dict[str, Any]] = {
    "DeepseekV3ForCausalLM": {
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 40.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
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
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 40.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 0.707,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 4096,
        },
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


_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOP_K = ("num_experts_per_tok", "experts_per_token", "top_k_experts", "moe_topk", "moe_top_k")
_TEXT_SUBCONFIGS = ("text_config", "language_config", "llm_config")
_DROP = ("quantization_config", "auto_map", "_name_or_path", "transformers_version", "compression_config")


# per-layer lists, shrunk together (one index mapping): attention types and Step-3.5's per-layer rope and clamps
_PER_LAYER = ("layer_types", "no_rope_layers", "rope_theta", "partial_rotary_factors", "swiglu_limits",
              "swiglu_limits_shared")  # fmt: skip


def _shrink_common(d: dict[str, Any], n_layers: int, wrapper: bool = False) -> list[str]:
    """Shrink one (text) config dict in place; return what was changed, for the record.
    ``wrapper``: the outer config of a multimodal target (its text model in ``text_config``): only
    the keys it already holds are shrunk, none is added (Kimi K2.5's ``hidden_size`` and
    ``vocab_size`` are read-only properties forwarding to its text config)."""
    notes: list[str] = []
    for k in _DROP:
        if k in d:
            d.pop(k)
            if k == "quantization_config":
                notes.append("quantization_config dropped (unquantized weights)")
    heads = int(d.get("num_attention_heads") or HEADS)
    kv = int(d.get("num_key_value_heads") or heads)
    depth = d.get("num_hidden_layers") if type(d.get("num_hidden_layers")) is int else d.get("num_layers")
    for k, size in (
        ("num_hidden_layers", n_layers),
        ("hidden_size", HIDDEN),
        ("num_attention_heads", HEADS),
        ("num_key_value_heads", HEADS if kv == heads else (1 if kv == 1 else 2)),
    ):
        if not wrapper or k in d:
            d[k] = size
    if type(d.get("num_layers")) is int:  # LongCat-Flash: its decoder blocks (two sublayers each)
        d["num_layers"] = n_layers
    if isinstance(d.get("num_attention_groups"), int):  # Step-3.5: its KV heads
        groups = d["num_attention_groups"]
        d["num_attention_groups"] = HEADS if groups == heads else (1 if groups == 1 else 2)
    other = d.get("attention_other_setting")
    if isinstance(other, dict):  # Step-3.5's sliding layers: more query heads than the full ones
        if isinstance(other.get("num_attention_heads"), int):
            more = other["num_attention_heads"] > heads
            other["num_attention_heads"] = HEADS + HEADS // 2 if more else HEADS
        if isinstance(other.get("num_attention_groups"), int):
            other["num_attention_groups"] = 1 if other["num_attention_groups"] == 1 else 2
        if isinstance(other.get("head_dim"), int):
            other["head_dim"] = HEAD_DIM
    if "head_dim" in d or ("qk_rope_head_dim" not in d and not wrapper):
        d["head_dim"] = HEAD_DIM
    # Gemma 4: its full-attention layers' own head size and KV heads (kept apart from the sliding ones)
    if isinstance(d.get("global_head_dim"), int):
        d["global_head_dim"] = 2 * HEAD_DIM
    if isinstance(d.get("num_global_key_value_heads"), int):  # fewer than the sliding layers', as published
        d["num_global_key_value_heads"] = (
            1 if d["num_global_key_value_heads"] < kv else d.get("num_key_value_heads", 1)
        )
    if isinstance(d.get("swa_head_dim"), int):
        d["swa_head_dim"] = HEAD_DIM
    for k in ("intermediate_size", "ffn_hidden_size"):  # ffn_hidden_size: LongCat-Flash's dense MLPs
        if k in d and (k == "intermediate_size" or isinstance(d[k], int)):
            d[k] = 2 * HIDDEN
    if not wrapper or "vocab_size" in d:
        d["vocab_size"] = VOCAB
    if isinstance(d.get("vocab_size_per_layer_input"), int):  # Gemma 4's per-layer embeddings
        d["vocab_size_per_layer_input"] = VOCAB
    if isinstance(d.get("hidden_size_per_layer_input"), int) and d["hidden_size_per_layer_input"] > 0:
        d["hidden_size_per_layer_input"] = HIDDEN // 4
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        v = d.get(k)
        if isinstance(v, int) and v >= VOCAB:
            d[k] = VOCAB - 1
        elif isinstance(v, list):
            d[k] = [min(int(x), VOCAB - 1) for x in v]
    for k in ("max_position_embeddings", "max_seq_len"):  # max_seq_len: Step-3.5's
        if isinstance(d.get(k), int):
            d[k] = min(d[k], 4096)
    for rope_key in ("rope_scaling", "rope_parameters"):
        rp = d.get(rope_key)
        if isinstance(rp, dict) and isinstance(rp.get("original_max_position_embeddings"), int):
            factor = float(rp.get("factor") or 1.0)
            rp["original_max_position_embeddings"] = max(
                16, int(min(rp["original_max_position_embeddings"], 4096 / factor))
            )
        if (
            isinstance(rp, dict)
            and isinstance(rp.get("mrope_section"), list)
            and isinstance(d.get("head_dim"), int)
        ):
            # multimodal rope (Qwen3.5): its sections split the rotary half of the (shrunk) head
            partial = float(rp.get("partial_rotary_factor") or d.get("partial_rotary_factor") or 1.0)
            rp["mrope_section"] = _rescale(rp["mrope_section"], int(d["head_dim"] * partial) // 2)
    # MoE: few small experts; grouped routing collapsed to one group
    for k in _EXPERT_COUNTS:
        if isinstance(d.get(k), int) and d[k] > 0:
            d[k] = 4
    for k in _TOP_K:  # never more experts per token than the 4 kept
        if isinstance(d.get(k), int):
            d[k] = min(d[k], 2)
    for k in (
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "moe_shared_expert_intermediate_size",  # Ling 2.0
        "expert_ffn_hidden_size",  # LongCat-Flash
        "share_expert_dim",  # Step-3.5
    ):
        if isinstance(d.get(k), int):
            d[k] = HIDDEN // 2
    if isinstance(d.get("zero_expert_num"), int) and d["zero_expert_num"] > 0:  # LongCat's identity experts
        d["zero_expert_num"] = 2
    moe_layers = d.get("moe_layers_enum")  # Step-3.5: "3,4,...": the MoE layers, as a string or a list
    if isinstance(moe_layers, (str, list, tuple)):
        kept = [int(x) for x in (moe_layers.split(",") if isinstance(moe_layers, str) else moe_layers)]
        kept = [i for i in kept if i < n_layers]
        d["moe_layers_enum"] = ",".join(map(str, kept)) if isinstance(moe_layers, str) else kept
    if isinstance(d.get("n_shared_experts"), int) and d["n_shared_experts"] > 1:
        d["n_shared_experts"] = 1
    for k in ("n_group", "topk_group"):
        if isinstance(d.get(k), int):
            d[k] = 1
    if isinstance(d.get("first_k_dense_replace"), int):
        d["first_k_dense_replace"] = min(d["first_k_dense_replace"], 2)
    if isinstance(d.get("mlp_only_layers"), list):
        d["mlp_only_layers"] = [i for i in d["mlp_only_layers"] if i < n_layers]
    # MLA
    if isinstance(d.get("kv_lora_rank"), int):
        d["kv_lora_rank"] = 32
        d["qk_nope_head_dim"] = 16
        d["qk_rope_head_dim"] = 8
        d["v_head_dim"] = 16
        if isinstance(d.get("q_lora_rank"), int):
            d["q_lora_rank"] = 32
        if "head_dim" in d:
            d["head_dim"] = 8
        if isinstance(d.get("qk_head_dim"), int):  # transformers 5.19's DeepSeek-V2 / LongCat: nope + rope
            d["qk_head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    # sliding windows / chunked attention: small enough to matter on a 7-token prompt
    if isinstance(d.get("sliding_window"), int):
        d["sliding_window"] = 4
    if isinstance(d.get("attention_chunk_size"), int):
        d["attention_chunk_size"] = 4
    if isinstance(d.get("max_window_layers"), int):
        d["max_window_layers"] = min(d["max_window_layers"], n_layers)
    mtp = d.get("num_nextn_predict_layers")
    mtp = mtp if isinstance(mtp, int) and mtp > 0 else 0
    for k in _PER_LAYER:
        v = d.get(k)
        if not isinstance(v, list) or not v:
            continue
        # lists with one entry per layer and then one per MTP layer (Step-3.5): the layers' part shrunk, the
        # MTP entries kept after it
        tail = v[depth:] if isinstance(depth, int) and mtp and len(v) == depth + mtp else []
        main = v[: len(v) - len(tail)]
        # the pattern from the start, ending as the original ends (Gemma 4 forces a full-attention last layer)
        d[k] = (main * n_layers)[: n_layers - 1] + [main[-1]] + tail
    # linear attention (Qwen3-Next)
    for k, v in (
        ("linear_num_value_heads", 4),
        ("linear_num_key_heads", 2),
        ("linear_key_head_dim", 16),
        ("linear_value_head_dim", 16),
    ):
        if isinstance(d.get(k), int):
            d[k] = v
    d["torch_dtype"] = DTYPE
    d.pop("dtype", None)
    return notes


def _rescale(parts: list[Any], total: int) -> list[int]:
    """``parts`` scaled to sum to ``total`` (largest remainders round up)."""
    ints = [max(0, int(x)) for x in parts]
    whole = sum(ints) or 1
    exact = [x * total / whole for x in ints]
    out = [int(x) for x in exact]
    for i in sorted(range(len(out)), key=lambda i: out[i] - exact[i])[: total - sum(out)]:
        out[i] += 1
    return out


# A vision (or other encoder) tower: one small layer; its output width the text model's.
_TOWER_KEYS: dict[str, int] = {
    "num_hidden_layers": 1,
    "depth": 1,
    "vt_num_hidden_layers": 1,
    "hidden_size": HIDDEN,
    "vt_hidden_size": HIDDEN,
    "mm_hidden_size": HIDDEN,
    "intermediate_size": 2 * HIDDEN,
    "vt_intermediate_size": 2 * HIDDEN,
    "num_attention_heads": HEADS,
    "num_heads": HEADS,
    "vt_num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "head_dim": HEAD_DIM,
    "global_head_dim": HEAD_DIM,
    "vision_output_dim": HIDDEN,
    "projector_input_dim": HIDDEN,
    "projector_output_dim": HIDDEN,
    "out_hidden_size": HIDDEN,
    "text_hidden_size": HIDDEN,
}


def _shrink_tower(v: dict[str, Any]) -> None:
    for k, val in _TOWER_KEYS.items():
        if isinstance(v.get(k), int):
            v[k] = val
            if k.startswith("vt_"):
                # Kimi K2.5's checkpoint writes vt_*; SGLang's vision config reads the plain names
                # (its defaults: 27 layers of 1152)
                v[k[3:]] = val
    if isinstance(v.get("deepstack_visual_indexes"), list):
        v["deepstack_visual_indexes"] = [i for i in v["deepstack_visual_indexes"] if i < 1]
    for k in _DROP:
        v.pop(k, None)


def real_depth(target_config: dict[str, Any]) -> int | None:
    """The target's own number of decoder layers (its text model's, for a multimodal one)."""
    for holder in (*(target_config.get(s) for s in _TEXT_SUBCONFIGS), target_config):
        if isinstance(holder, dict) and type(holder.get("num_hidden_layers")) is int:
            return int(holder["num_hidden_layers"])
    return None


def shrink_config(
    target_config: dict[str, Any], n_layers: int = N_LAYERS
) -> tuple[dict[str, Any], list[str]]:
    """A tiny copy of ``target_config``: ``n_layers`` layers (8 for the matrix; a given pair keeps
    its own depth, so its ids mean what they mean), hidden 64, 4 heads of 16, vocab 256, 4 experts of
    32; architecture, MoE vs dense, MLA, sinks, tied embeddings, window and layer-type patterns kept."""
    d = copy.deepcopy(target_config)
    subs = [sub for sub in _TEXT_SUBCONFIGS if isinstance(d.get(sub), dict)]
    notes = _shrink_common(d, n_layers, wrapper=bool(subs))
    for sub in subs:
        notes += _shrink_common(d[sub], n_layers)
    for tower in ("vision_config", "audio_config"):
        if isinstance(d.get(tower), dict):
            _shrink_tower(d[tower])
    return d, sorted(set(notes))


def draft_config_for(
    draft_config: dict[str, Any], target_small: dict[str, Any], case: dict[str, Any]
) -> dict[str, Any]:
    """The draft config shrunk to the tiny target's width, with the case's ids written."""
    d = copy.deepcopy(draft_config)
    for k in _DROP:
        d.pop(k, None)
    sub = target_small.get("text_config")
    text: dict[str, Any] = sub if isinstance(sub, dict) else target_small
    d.update(
        hidden_size=int(text.get("hidden_size", HIDDEN)),
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        head_dim=HEAD_DIM,
        vocab_size=VOCAB,
        draft_vocab_size=DRAFT_VOCAB,
        max_position_embeddings=4096,
        torch_dtype=DTYPE,
    )
    if "target_hidden_size" in d:
        d["target_hidden_size"] = d["hidden_size"]
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):  # inside the tiny vocabulary
        v = d.get(k)
        if isinstance(v, int) and v >= VOCAB:
            d[k] = VOCAB - 1
        elif isinstance(v, list):
            d[k] = [min(int(x), VOCAB - 1) for x in v]
    if case.get("given"):
        return d  # the draft's own ids, where it wrote them
    d.pop("eagle_config", None)
    d.pop("eagle_aux_hidden_state_layer_ids", None)
    if "nested" in case:
        ec: dict[str, Any] = {}
        if case["nested"] is not None:
            ec["eagle_aux_hidden_state_layer_ids"] = list(case["nested"])
        d["eagle_config"] = ec
    if "top" in case:
        d["eagle_aux_hidden_state_layer_ids"] = list(case["top"])
    return d


MAX_GIVEN_LAYERS = 256  # a given target deeper than this is observed this deep (none published comes near)
GIVEN = "given"  # not a matrix case: the draft config's own ids, on the target at its own depth


def written_ids(case: dict[str, Any]) -> list[int] | None:
    ids = case.get("nested", case.get("top"))
    return None if ids is None else list(ids)


def intended_ids(case: dict[str, Any], n_layers: int = N_LAYERS) -> list[int]:
    """What the draft was trained on: the ids written (wherever), or SpecForge's default."""
    ids = written_ids(case)
    return [1, n_layers // 2 - 1, n_layers - 4] if ids is None else ids


def given_case(draft_config: dict[str, Any]) -> dict[str, Any]:
    """The case a draft config makes as written: its nested ids, else its top-level ones."""
    ec = draft_config.get("eagle_config")
    nested = ec.get("eagle_aux_hidden_state_layer_ids") if isinstance(ec, dict) else None
    top = draft_config.get("eagle_aux_hidden_state_layer_ids")
    case: dict[str, Any] = {"given": True}
    if isinstance(nested, list):
        case["nested"] = nested
    elif isinstance(top, list):
        case["top"] = top
    else:
        case["nested"] = None
    return case


# -- SGLang on CPU -------------------------------------------------------------------------------------


_READY: dict[str, Any] = {}


def _prepare_process(quiet: bool) -> str:
    """Stand-ins, CPU kernels, a one-process gloo world, torch.compile off; SGLang's version."""
    if "version" in _READY:
        return str(_READY["version"])
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    from eagle3_top.hooks.sglang import cpu_kernels, cpu_standins

    cpu_standins.install_standins()
    import torch

    torch._dynamo.config.disable = True  # SGLang's @torch.compile helpers run eager
    if quiet:
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
    import sglang

    cpu_kernels.install()
    cpu_standins.init_process_group()
    _register_remote_code_configs()
    _READY["version"] = sglang.__version__
    return str(sglang.__version__)


def _register_remote_code_configs() -> None:
    """A plain config class for each ``REMOTE_CODE_CONFIGS`` type transformers does not know (the
    checkpoint's own class is remote code, absent here): every field kept as written."""
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for model_type in REMOTE_CODE_CONFIGS:
        if model_type in CONFIG_MAPPING:
            continue
        cls = type(f"RemoteCodeConfig_{model_type}", (PretrainedConfig,), {"model_type": model_type})
        AutoConfig.register(model_type, cls)


def _launcher_argv(tdir: str, ddir: str) -> list[str]:
    return [
        "--model-path", tdir,
        "--device", "cpu",
        "--skip-tokenizer-init",
        "--dtype", DTYPE,
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", ddir,
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip


# Serving flags an architecture needs on a CPU that do not touch the capture: SGLang's CPU platform
# refuses the Mamba radix-cache strategy (extra_buffer) it picks for a hybrid model under spec decoding.
_MAMBA_NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
# Gemma 4: 0.5.17 accepts only trtllm_mha / triton / intel_xpu attention and picks intel_amx on a CPU
# (attention runs on the observer's stand-in backend whatever is named; triton is what a GPU may pick).
EXTRA_ARGV: dict[str, list[str]] = {
    "Qwen3NextForCausalLM": _MAMBA_NO_BUFFER,
    "Qwen3_5MoeForConditionalGeneration": _MAMBA_NO_BUFFER,
    "Gemma4ForConditionalGeneration": ["--attention-backend", "triton"],
}


def _server_args(tdir: str, ddir: str, arch: str) -> Any:
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(_launcher_argv(tdir, ddir) + EXTRA_ARGV.get(arch, []))
    if hasattr(sa, "resolve_once"):  # 0.5.22+: resolved on demand
        sa.resolve_once()
    return sa


def _init_dp_attention(sa: Any, mc: Any) -> None:
    """What the model runner does before it builds a model: 0.5.17's layers read the attention
    data-parallel size (0.5.23 derives it from the published context)."""
    from sglang.srt.runtime_context import get_parallel

    try:
        _ = get_parallel().attn_dp_size
    except AssertionError:  # "dp attention not initialized!"
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        initialize_dp_attention(sa, mc)


def _read_ids(sa: Any, mc: Any) -> Any:
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return resolve_spec_aux_hidden_state_config(
        server_args=sa,
        model_config=mc,
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        is_draft_worker=False,
    )


def _build_target(mc: Any) -> Any:
    """The target as SGLang's dummy-weights loader builds it (``--load-format dummy``: the class the
    model registry resolves, ``_initialize_model``, weights set, the model's post-load fix-ups, each
    quant method's ``process_weights_after_loading``), with seeded normal weights instead of its
    near-zero uniform ones."""
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader import loader
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    with set_default_torch_dtype(mc.dtype), torch.device("cpu"):
        model = loader._initialize_model(mc, LoadConfig())
        _random_init(model)
        post = getattr(loader, "post_load_weights", None) or getattr(loader, "_post_load_weights", None)
        if post is not None:
            post(model)
        elif callable(getattr(model, "post_load_weights", None)):
            model.post_load_weights()
        for _, module in model.named_modules():
            quant_method = getattr(module, "quant_method", None)
            if quant_method is not None and hasattr(quant_method, "process_weights_after_loading"):
                quant_method.process_weights_after_loading(module)
    return model.eval()


def _random_init(model: Any) -> None:
    """Seeded normal weights, never zeros (every layer must leave a distinct stream): matrices
    N(0, 1/fan_in), norm weights 1 + N(0, 0.01), other vectors N(0, 0.01)."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for mod in model.modules():
            is_norm = "norm" in type(mod).__name__.lower()
            for p in mod.parameters(recurse=False):
                if p.numel() == 0 or not p.dtype.is_floating_point:
                    continue
                r = torch.randn(p.shape, generator=g, dtype=torch.float32)
                if p.dim() >= 2:
                    r = r / max(1.0, float(p.shape[-1])) ** 0.5
                elif is_norm:
                    r = 1.0 + 0.1 * r
                else:
                    r = 0.1 * r
                p.copy_(r.to(p.dtype))


def _set_capture(model: Any, aux_cfg: Any) -> None:
    """As the model runner: ``configure_aux_hidden_state_capture`` where the release has it."""
    try:
        from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
            configure_aux_hidden_state_capture,
        )
    except ImportError:
        configure_aux_hidden_state_capture = None
    if configure_aux_hidden_state_capture is None:
        if aux_cfg.eagle_use_aux_hidden_state:
            model.set_eagle3_layers_to_capture(aux_cfg.eagle_aux_hidden_state_layer_ids)
        return
    params = inspect.signature(configure_aux_hidden_state_capture).parameters
    values = {
        "model": model,
        "eagle_use_aux_hidden_state": aux_cfg.eagle_use_aux_hidden_state,
        "eagle_aux_hidden_state_layer_ids": aux_cfg.eagle_aux_hidden_state_layer_ids,
        "dflash_use_aux_hidden_state": getattr(aux_cfg, "dflash_use_aux_hidden_state", False),
        "dflash_target_layer_ids": getattr(aux_cfg, "dflash_target_layer_ids", None),
        "is_dspark": getattr(aux_cfg, "is_dspark", False),
    }
    configure_aux_hidden_state_capture(**{k: v for k, v in values.items() if k in params})


# what a decoder stack calls its token embedding (``word_embeddings``: Ling / Bailing)
_EMBEDDINGS = ("embed_tokens", "word_embeddings")


def _embedding(inner: Any) -> Any:
    return next(getattr(inner, name) for name in _EMBEDDINGS if hasattr(inner, name))


def _inner_model(model: Any) -> Any:
    """The decoder stack holding the capture loop (``model.model``; Llama 4: its language model's)."""
    for path in ("model", "language_model.model", "language_model", "model.language_model"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "layers") and any(hasattr(obj, name) for name in _EMBEDDINGS):
            return obj
    raise AttributeError(f"{type(model).__name__}: no decoder stack with layers and a token embedding")


def _flagged(inner: Any) -> list[int] | None:
    """The layers flagged ``_is_layer_to_capture`` (Qwen2/3-MoE, Qwen3-Next: what their forward
    loop reads), or None for a model that keeps no flags."""
    layers = list(inner.layers)
    if not any(hasattr(layer, "_is_layer_to_capture") for layer in layers) and not _reads_flags(inner):
        return None
    return [i for i, layer in enumerate(layers) if getattr(layer, "_is_layer_to_capture", False)]


def _reads_flags(inner: Any) -> bool:
    """Whether the decoder stack's forward loop reads ``_is_layer_to_capture`` (then an empty
    ``flagged`` means: it captures nothing, whatever ``layers_to_capture`` holds; Qwen3.5 before
    0.5.23 stores EAGLE-3's list where its loop never looks)."""
    try:
        return "_is_layer_to_capture" in inspect.getsource(type(inner).forward)
    except (OSError, TypeError):
        return False


def _native(inner: Any) -> list[int] | None:
    """The capture list as stored (``layers_to_capture``), else the ``_is_layer_to_capture`` flags."""
    ltc = getattr(inner, "layers_to_capture", None)
    if ltc is not None:
        return [int(i) for i in ltc]
    flagged = [i for i, layer in enumerate(inner.layers) if getattr(layer, "_is_layer_to_capture", False)]
    return flagged or None


def _forward_batch(input_ids: Any) -> Any:
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    n = int(input_ids.shape[0])
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=input_ids,
        req_pool_indices=torch.zeros(1, dtype=torch.int64),
        seq_lens=torch.tensor([n]),
        out_cache_loc=torch.arange(n),
        seq_lens_sum=n,
        positions=torch.arange(n),
        extend_seq_lens=torch.tensor([n]),
        extend_prefix_lens=torch.tensor([0]),
        extend_start_loc=torch.tensor([0]),
        seq_lens_cpu=torch.tensor([n]),
        extend_seq_lens_cpu=[n],
        extend_prefix_lens_cpu=[0],
        extend_num_tokens=n,
    )
    return fb


@contextlib.contextmanager
def _attention(backend: Any, fb: Any) -> Iterator[None]:
    fb.attn_backend = backend
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ImportError:
        yield
        return
    with forward_context(ForwardContext(attn_backend=backend)):
        yield


# -- references and the write log ----------------------------------------------------------------------


@dataclass
class _Region:
    """The bytes a strided tensor covers in its storage: a span, and the exact bytes on demand
    (a column slice of a packed [T, K*H] buffer interleaves with its neighbours)."""

    ptr: int
    lo: int
    hi: int
    item: int
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    _bytes: frozenset[int] | None = None

    def exact(self) -> frozenset[int]:
        if self._bytes is None:
            import torch

            idx = torch.tensor([self.offset])
            for size, st in zip(self.shape, self.stride, strict=True):
                idx = (idx[:, None] + torch.arange(size)[None, :] * st).reshape(-1)
            starts = idx * self.item
            self._bytes = frozenset((starts[:, None] + torch.arange(self.item)[None, :]).reshape(-1).tolist())
        return self._bytes

    def overlaps(self, other: _Region) -> bool:
        if self.ptr != other.ptr or not (self.lo < other.hi and other.lo < self.hi):
            return False
        return not self.exact().isdisjoint(other.exact())


def _region(t: Any) -> _Region | None:
    import torch

    if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.layout != torch.strided or t.is_meta:
        return None
    item = int(t.element_size())
    shape = tuple(int(x) for x in t.shape)
    stride = tuple(int(x) for x in t.stride())
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(shape, stride, strict=True))
    offset = int(t.storage_offset())
    lo = offset * item
    return _Region(int(t.untyped_storage().data_ptr()), lo, lo + span * item, item, offset, shape, stride)


_ALLOC_OPS = {
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "new_zeros",
}


@dataclass
class _Observation:
    """What the hooks and the write log saw during one forward."""

    refs: dict[int, Any] = field(default_factory=dict)  # canonical id -> clone at hook time
    phase: int = -1  # -1 embedding, k block k, N final norm
    defines: list[tuple[int, _Region]] = field(default_factory=list)  # (phase, region) creations/writes
    writes: list[tuple[int, _Region]] = field(default_factory=list)  # (phase, region) in-place writes
    keep: list[Any] = field(default_factory=list)  # storages held so no address is reused


def _write_log_mode(obs: _Observation) -> Any:
    """A TorchDispatchMode recording every op's in-place writes and fresh outputs, by phase."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class WriteLog(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            schema = func._schema
            written: list[Any] = []
            for i, a in enumerate(schema.arguments):
                if a.alias_info is not None and a.alias_info.is_write:
                    val = args[i] if i < len(args) else kwargs.get(a.name)
                    written += [t for t in tree_flatten(val)[0] if isinstance(t, torch.Tensor)]
            for t in written:
                r = _region(t)
                if r is not None:
                    obs.writes.append((obs.phase, r))
                    obs.defines.append((obs.phase, r))
                    obs.keep.append(t.untyped_storage())
            base = func.overloadpacket.__name__
            if not written and base not in _ALLOC_OPS and not any(r.alias_info for r in schema.returns):
                for t in tree_flatten(out)[0]:
                    r = _region(t)
                    if r is not None:
                        obs.defines.append((obs.phase, r))
                        obs.keep.append(t.untyped_storage())
            return out

    return WriteLog()


def _stream_of_block_output(output: Any, kwargs: dict[str, Any], args: tuple[Any, ...]) -> Any:
    """A decoder block's output stream. A boundary-stage block (0.5.22+) returns its output (alone,
    or with DeepSeek's top-k indices) and keeps the residual in its forward batch's stream: the
    output completed with that residual (``ResidualStream.snapshot``, which copies). A block of the
    older kind returns ``(hidden, residual, ...)``: ``hidden + residual`` (``hidden`` alone while the
    residual is still None)."""
    import torch

    hidden = output[0] if isinstance(output, tuple) and output else output
    fb = kwargs.get("forward_batch")
    if fb is None:
        fb = next((a for a in args if hasattr(a, "forward_mode")), None)
    stream = getattr(fb, "residual_stream", None)
    if stream is not None and hasattr(stream, "snapshot"):
        return stream.snapshot(hidden)
    if not isinstance(hidden, torch.Tensor):
        raise TypeError(f"block output of type {type(hidden).__name__}: no stream to read")
    if isinstance(output, tuple) and len(output) > 1:
        residual = output[1]
        if isinstance(residual, torch.Tensor) and residual.shape == hidden.shape:
            return hidden + residual
    return hidden.clone()


def _install_hooks(inner: Any, obs: _Observation) -> list[Any]:
    import torch

    handles = []

    def on_embed(_m: Any, _args: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            obs.refs[-1] = output.detach().clone()

    handles.append(_embedding(inner).register_forward_hook(on_embed))
    for k, layer in enumerate(inner.layers):

        def pre(_m: Any, _args: Any, _kw: Any, k: int = k) -> None:
            obs.phase = k

        def post(_m: Any, args: Any, kwargs: Any, output: Any, k: int = k) -> None:
            obs.refs[k] = _stream_of_block_output(output, kwargs, args).detach().clone()

        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(layer.register_forward_hook(post, with_kwargs=True))
    norm = getattr(inner, "norm", None)
    if isinstance(norm, torch.nn.Module):

        def pre_norm(_m: Any, _args: Any) -> None:
            obs.phase = len(inner.layers)

        handles.append(norm.register_forward_pre_hook(pre_norm))
    return handles


def _slots_of(result: Any, hidden_size: int) -> list[Any] | None:
    """The aux slots a decoder stack returned: a list of tensors, or one packed [T, K*H] tensor."""
    import torch

    if not isinstance(result, tuple) or len(result) < 2:
        return []  # no aux returned: nothing captured
    aux = result[1]
    if isinstance(aux, torch.Tensor):
        k = aux.shape[-1] // hidden_size
        return [aux[..., i * hidden_size : (i + 1) * hidden_size] for i in range(k)]
    if isinstance(aux, (list, tuple)):
        return list(aux)
    return None


def _later_modified(slot: Any, obs: _Observation) -> bool:
    r = _region(slot)
    if r is None:
        return False
    phases = [p for p, d in obs.defines if d.overlaps(r)]
    if not phases:
        return False
    born = min(phases)
    return any(p > born and w.overlaps(r) for p, w in obs.writes)


def _compare(slots: list[Any], obs: _Observation, intended: list[int]) -> list[dict[str, Any]]:
    rows = []
    for j, s in enumerate(slots):
        sf = s.detach().float()
        diffs = {
            cid: float((sf - ref.float()).abs().max())
            for cid, ref in obs.refs.items()
            if tuple(ref.shape) == tuple(s.shape)
        }
        holds = None
        if diffs:  # equal up to bfloat16 rounding (in practice bit-equal; distinct layers differ by O(1))
            best = min(diffs, key=lambda c: diffs[c])
            scale = max(1.0, float(obs.refs[best].float().abs().max()))
            if diffs[best] <= HOLDS_TOLERANCE * scale:
                holds = best
        want = intended[j] if j < len(intended) else None
        rows.append(
            {
                "holds": holds,
                "intended": want,
                "max_abs_diff_to_intended": diffs.get(want) if want is not None else None,
                "shares_storage_with_later_modified": _later_modified(s, obs),
            }
        )
    return rows


# -- one case ------------------------------------------------------------------------------------------


class NotObservable(Exception):
    """Raised by the observer for what it cannot observe here; its message says why."""


def _emulation_gap(exc: BaseException, frames: list[traceback.FrameSummary]) -> str | None:
    """Why ``exc`` says nothing about SGLang on a GPU, or None when it may well: raised by the
    emulation itself, by a stand-in of a GPU-only package reaching arithmetic or a Triton kernel
    launch, or by an SGLang CPU fallback refusing what its GPU kernel does."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    msg = str(exc)
    if frames and os.path.abspath(frames[-1].filename).startswith(here):
        return "eagle3-top's CPU emulation or observer cannot handle this"
    if "_StandInMeta" in msg or "StandIn" in msg:
        return "a GPU-only package (stand-in) was called for a value"
    if isinstance(exc, TypeError) and "'function' object is not subscriptable" in msg:
        return "a Triton kernel launch without a CPU stand-in"
    if isinstance(exc, NotImplementedError):
        return "SGLang's CPU fallback does not implement what the GPU kernel does"
    if "Torch not compiled with CUDA enabled" in msg or "no NVIDIA driver" in msg:
        return "a CUDA-only call (no GPU here)"
    return None


def _no_model_class(arch: str, version: str) -> str | None:
    """None when the release's model registry resolves ``arch`` natively. Else the fact, plainly
    (``no model class: ...``: the release has no class for it; an EAGLE-3 server with this target
    cannot start, its Transformers fallback captures no aux hidden states). A class the release's
    source defines but that did not import here is our problem, not the release's: raised."""
    import re

    import sglang.srt.models as models_pkg
    from sglang.srt.models.registry import ModelRegistry

    if arch in ModelRegistry.get_supported_archs():
        return None
    pattern = re.compile(rf"^class {re.escape(arch)}\b", re.M)
    for folder in models_pkg.__path__:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                if not pattern.search(f.read()):
                    continue
            module = f"sglang.srt.models.{name[:-3]}"
            try:
                importlib.import_module(module)
            except Exception as exc:
                raise NotObservable(
                    f"{module} defines {arch} but does not import here "
                    f"({type(exc).__name__}: {str(exc).strip()[:200]})"
                ) from exc
            return (
                f"no model class: SGLang {version} defines {arch} in {module} but does not register "
                "it in its model registry, so an EAGLE-3 server cannot start with this target"
            )
    return (
        f"no model class: SGLang {version} has no model class for {arch} (its model registry does "
        "not know the architecture), so an EAGLE-3 server cannot start with this target"
    )


def _error(exc: BaseException, harness_step: str | None = None) -> tuple[str, str | None]:
    """``"Type: first line"`` (prefixed ``not observable on CPU: <why>`` for an emulation gap, or
    for any error raised while ``harness_step``, a step of ours before SGLang's model code, ran)
    and the innermost frame in SGLang's code (``sglang/srt/...:line``)."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {msg}"[:400]
    if _READY.get("traceback"):
        traceback.print_exception(exc, file=sys.stderr)
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, NotObservable):
        text, gap = f"{NOT_OBSERVABLE}{msg}"[:400], None
    elif harness_step is not None:
        gap = f"eagle3-top's harness failed at {harness_step}, before SGLang's model code ran"
    else:
        gap = _emulation_gap(exc, frames)
    if gap is not None:
        text = f"{NOT_OBSERVABLE}{gap} ({text})"
    import sglang

    root = os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__))) + os.sep
    for frame in reversed(frames):
        if os.path.abspath(frame.filename).startswith(root + "sglang" + os.sep):
            return text, f"{os.path.relpath(frame.filename, root)}:{frame.lineno}"
    return text, None


def _write_models(root: str, name: str, target: dict[str, Any], draft: dict[str, Any]) -> tuple[str, str]:
    tdir, ddir = os.path.join(root, name, "target"), os.path.join(root, name, "draft")
    for path, cfg in ((tdir, target), (ddir, draft)):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    return tdir, ddir


def _blank_row(
    version: str, arch: str, case_name: str, case: dict[str, Any], n_layers: int
) -> dict[str, Any]:
    return {
        "sglang_version": version,
        "architecture": arch,
        "model_class": None,
        "num_layers": n_layers,
        "hidden_size": HIDDEN,
        "case": case_name,
        "ids": written_ids(case),
        "ids_where": "top_level" if "top" in case else "eagle_config",
        "ids_read": None,
        "use_aux": None,
        "native": None,
        "flagged": None,
        "setup_error": None,
        "forward_error": None,
        "error_at": None,
        "slots": None,
        "cuda_path_ops": None,
        "emulated_kernel_calls": None,
        "seconds": None,
    }


def _observe_case(
    version: str,
    arch: str,
    target_small: dict[str, Any],
    draft_config: dict[str, Any],
    case_name: str,
    root: str,
    cuda_path: bool,
) -> dict[str, Any]:
    import torch
    from eagle3_top.hooks.sglang import cpu_kernels, cpu_standins

    case = given_case(draft_config) if case_name == GIVEN else CASES[case_name]
    t0 = time.monotonic()
    row = _blank_row(version, arch, case_name, case, real_depth(target_small) or N_LAYERS)
    step = "the model registry"
    try:
        missing = _no_model_class(arch, version)
        if missing is not None:
            row["setup_error"] = missing
            row["seconds"] = round(time.monotonic() - t0, 3)
            return row
        step = "the shrunk draft config"
        draft = draft_config_for(draft_config, target_small, case)
        tdir, ddir = _write_models(root, f"{arch}-{case_name}", target_small, draft)
        from sglang.srt.configs.model_config import ModelConfig

        step = "ServerArgs from our launcher flags"
        sa = _server_args(tdir, ddir, arch)
        cpu_standins.publish_server_args(sa)
        step = "ModelConfig of the shrunk target"
        mc = ModelConfig.from_server_args(sa)
        step = "the attention data-parallel setup"
        _init_dp_attention(sa, mc)
        step = ""  # from here on SGLang's own code: its errors are results
        aux_cfg = _read_ids(sa, mc)
        ids_read = aux_cfg.eagle_aux_hidden_state_layer_ids
        row["ids_read"] = None if ids_read is None else [int(i) for i in ids_read]
        row["use_aux"] = bool(aux_cfg.eagle_use_aux_hidden_state)
        model = _build_target(mc)
        row["model_class"] = f"{type(model).__module__}.{type(model).__qualname__}"
        if cuda_path:
            row["cuda_path_ops"] = cpu_kernels.use_cuda_path(model)
        _set_capture(model, aux_cfg)
        inner = _inner_model(model)
        row["native"] = _native(inner)
        row["flagged"] = _flagged(inner)
    except Exception as exc:  # a crash at setup is a result (SGLang's, or ours: marked unobserved)
        row["setup_error"], row["error_at"] = _error(exc, harness_step=step or None)
        row["seconds"] = round(time.monotonic() - t0, 3)
        return row
    try:
        g = torch.Generator().manual_seed(SEED + 1)
        input_ids = torch.randint(1, VOCAB - 1, (PROMPT_LEN,), generator=g)
        fb = _forward_batch(input_ids)
        obs = _Observation()
        handles = _install_hooks(inner, obs)
        cpu_kernels.CALLS.clear()
        try:
            with (
                torch.no_grad(),
                _attention(cpu_kernels.StandInAttentionBackend([PROMPT_LEN], getattr(torch, DTYPE)), fb),
            ):
                with _write_log_mode(obs):
                    result = inner(input_ids, fb.positions, fb)
        finally:
            for h in handles:
                h.remove()
            row["emulated_kernel_calls"] = dict(sorted(cpu_kernels.CALLS.items()))
        text = getattr(inner, "config", None) or target_small
        hidden = int(getattr(text, "hidden_size", HIDDEN))
        slots = _slots_of(result, hidden)
        if slots is None:
            raise TypeError(f"aux of type {type(result[1]).__name__}: not a list or packed tensor")
        row["slots"] = _compare(slots, obs, intended_ids(case, row["num_layers"]))
    except Exception as exc:  # a crash in the forward is a result
        row["forward_error"], row["error_at"] = _error(exc)
    row["seconds"] = round(time.monotonic() - t0, 3)
    return row


def _summary(row: dict[str, Any]) -> str:
    if row["setup_error"]:
        return f"setup error: {row['setup_error']}"
    if row["forward_error"]:
        return f"forward error: {row['forward_error']}"
    slots = row["slots"] or []
    return "slots " + (
        " ".join(
            f"{s['holds']}{'*' if s['shares_storage_with_later_modified'] else ''}"
            f"{'' if s['holds'] == s['intended'] else '!'}"
            for s in slots
        )
        or "none"
    )


def observe(
    target_config: dict[str, Any],
    draft_config: dict[str, Any],
    *,
    cases: Sequence[str] = tuple(CASES),
    quiet: bool = True,
    cuda_path: bool = True,
    source: str | None = None,
    progress: Callable[[str], None] | None = _say,
) -> list[dict[str, Any]]:
    """Run each case on the installed SGLang with a tiny copy of ``target_config``; one dict per case.
    ``cuda_path=False`` leaves the norms and activations on SGLang's native CPU path (a control:
    their out-of-place arithmetic hides the in-place aliasing of the CUDA kernels)."""
    unknown = [c for c in cases if c not in CASES and c != GIVEN]
    if unknown:
        raise ValueError(f"unknown case(s) {unknown}; known: {list(CASES)} and {GIVEN}")
    archs = target_config.get("architectures") or ["?"]
    arch = str(archs[0])
    version = _prepare_process(quiet)
    depth = real_depth(target_config) if GIVEN in cases else None  # a given pair: its ids at its own depth
    try:
        target_small, notes = shrink_config(
            target_config, min(depth, MAX_GIVEN_LAYERS) if depth else N_LAYERS
        )
        shrink_error = None
    except Exception as exc:  # ours: nothing of SGLang ran
        target_small, notes = target_config, []
        shrink_error, _ = _error(exc, harness_step="shrinking the target config")
    if depth is not None and depth > MAX_GIVEN_LAYERS:
        notes.append(f"observed at {MAX_GIVEN_LAYERS} of its {depth} layers")
    rows = []
    with tempfile.TemporaryDirectory(prefix="e3t-observe-") as root:
        for name in cases:
            if shrink_error is not None:
                case = given_case(draft_config) if name == GIVEN else CASES[name]
                row = _blank_row(version, arch, name, case, N_LAYERS)
                row.update(setup_error=shrink_error, seconds=0.0)
            else:
                row = _observe_case(version, arch, target_small, draft_config, name, root, cuda_path)
            row["config_source"] = source
            row["config_notes"] = notes
            rows.append(row)
            if progress is not None:
                progress(f"[{version}] {arch} {name}: {_summary(row)} ({row['seconds']:.1f} s)")
    return rows


# -- command line --------------------------------------------------------------------------------------


def _load(path: str) -> dict[str, Any]:
    with open(path) as f:
        d: dict[str, Any] = json.load(f)
    return d


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eagle3_top.hooks.sglang.observe",
        description="Observe which layer each EAGLE-3 aux slot really holds on the installed SGLang "
        "(tiny target, real model code, CPU).",
    )
    p.add_argument("--target-config", help="the target's config.json (full size; it is shrunk)")
    p.add_argument("--draft-config", help="the draft's config.json (default: a SpecForge Llama draft)")
    p.add_argument(
        "--case",
        action="append",
        choices=[*CASES, GIVEN],
        help=f"a case to run (repeatable; default all); {GIVEN}: the draft config's own ids, on the target "
        "at its own depth (what preflight asks)",
    )
    p.add_argument("--matrix", action="store_true", help="every known architecture x every case")
    p.add_argument("--arch", action="append", choices=list(ARCHITECTURES), help="with --matrix: only these")
    p.add_argument(
        "--config-dir",
        help="with --matrix: take each architecture's target (and draft) config from the published "
        "*-target.json / *-draft.json files here (e.g. tests/data/published); transformers' defaults otherwise",
    )
    p.add_argument(
        "--native-path",
        action="store_true",
        help="control: leave norms and activations on SGLang's native CPU path (no in-place kernels)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="keep SGLang's own logging and warnings; tracebacks of errors"
    )
    a = p.parse_args(argv)
    if a.matrix == bool(a.target_config):
        p.error("give --target-config (and --draft-config), or --matrix (built-in configs)")
    draft = _load(a.draft_config) if a.draft_config else default_draft_config()
    cases = a.case or list(CASES)
    cuda = not a.native_path
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
        # the stand-ins before transformers: it decides once which optional packages exist
        _READY["traceback"] = a.verbose
        _prepare_process(quiet=not a.verbose)
        if a.matrix:
            for arch in a.arch or list(ARCHITECTURES):
                try:
                    target, found_draft, source = matrix_config(arch, a.config_dir)
                except Exception as exc:  # ours: no config to observe it with
                    err, _ = _error(exc, harness_step="finding the architecture's config")
                    version = _prepare_process(quiet=not a.verbose)
                    for name in cases:
                        case = given_case(draft) if name == GIVEN else CASES[name]
                        rows.append({**_blank_row(version, arch, name, case, N_LAYERS), "setup_error": err})
                        _say(f"[{version}] {arch} {name}: setup error: {err}")
                    continue
                rows += observe(
                    target,
                    draft if a.draft_config or found_draft is None else found_draft,
                    cases=cases,
                    quiet=not a.verbose,
                    cuda_path=cuda,
                    source=source,
                )
        else:
            rows = observe(
                _load(a.target_config),
                draft,
                cases=cases,
                quiet=not a.verbose,
                cuda_path=cuda,
                source=os.path.basename(a.target_config),
            )
    _say(f"{len(rows)} observations in {time.monotonic() - t0:.1f} s")
    json.dump(rows, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
