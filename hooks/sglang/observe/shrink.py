"""The tiny copy the observer builds of a target: its config shrunk to ``N_LAYERS`` layers (a given
pair keeps its own depth), hidden 64, 4 heads of 16, vocab 256, 4 experts of 32, with the
architecture and its structural switches kept (MoE vs dense, MLA, sinks, tied embeddings, window
and layer-type patterns, a multimodal target's towers at one small layer); and the draft config
shrunk to the tiny target's width, with a case's ids written where the case says."""

from __future__ import annotations

import copy
from typing import Any

from eagle3_top.tracer.engines.sglang import defects

N_LAYERS = defects.NUM_LAYERS
HIDDEN = 64
HEADS = 4
HEAD_DIM = 16
VOCAB = 256
DRAFT_VOCAB = 64
# what SGLang serves in (its CUDA RMSNorm has no float32 kernel; Llama 4 hardcodes bfloat16 off CUDA)
DTYPE = "bfloat16"


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
