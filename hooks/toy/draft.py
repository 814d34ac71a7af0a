"""EAGLE-3 draft model mirroring SGLang ``llama_eagle3.LlamaForCausalLMEagle3`` (plain torch).

Module tree: ``model.embed_tokens`` (the target's, shared and frozen), ``model.fc``
(K*H_target -> H), ``model.layers[0]`` (qkv input 2H = cat(input_layernorm(embeds),
hidden_norm(hidden))), ``model.norm``, ``lm_head`` over ``draft_vocab_size``; ``hot_token_id``
maps draft ids to target ids (``d2t`` holds offsets target_id - draft_id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from .model import MLP, Attention, HFStyleConfig, KVCache, RMSNorm, cache_geometry, rope_cos_sin


@dataclass
class ToyEagle3Config(HFStyleConfig):
    ARCHITECTURE: ClassVar[str] = "LlamaForCausalLMEagle3"

    hidden_size: int = 128
    num_hidden_layers: int = 1
    num_attention_heads: int = 4
    intermediate_size: int = 352
    vocab_size: int = 256
    draft_vocab_size: int = 192
    target_hidden_size: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 512
    torch_dtype: str = "float16"
    eagle_config: dict = field(
        default_factory=lambda: {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5], "use_aux_hidden_state": True}
    )

    @property
    def num_aux_hidden_states(self) -> int:
        """Resolved like SGLang's draft: eagle_config ids' length, else 3."""
        try:
            return len(self.eagle_config["eagle_aux_hidden_state_layer_ids"])
        except Exception:
            return 3

    @classmethod
    def _known(cls, **kw: Any) -> dict[str, Any]:
        if not isinstance(kw.get("eagle_config"), dict):
            kw["eagle_config"] = {}
        return kw


class Eagle3DecoderLayer(nn.Module):
    def __init__(self, cfg: ToyEagle3Config):
        super().__init__()
        H = cfg.hidden_size
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.self_attn = Attention(2 * H, H, cfg.num_attention_heads, cfg.rope_theta)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.mlp = MLP(H, cfg.intermediate_size)

    def attn_input(self, embeds, hidden):
        return torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)

    def forward(self, embeds, hidden, rope, cache_kv=None, write_idx=None, attn_mask=None):
        h = hidden + self.self_attn(self.attn_input(embeds, hidden), rope, cache_kv, write_idx, attn_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class ToyEagle3Model(nn.Module):
    def __init__(self, cfg: ToyEagle3Config):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.fc = nn.Linear(cfg.target_hidden_size * cfg.num_aux_hidden_states, cfg.hidden_size, bias=False)
        self.layers = nn.ModuleList([Eagle3DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids, hidden_states, cache: KVCache, lens):
        """Returns ``(normed [B,T,H], prenorm [B,T,H])``. ``fc`` runs only when the incoming width
        differs from the embedding width (SGLang: draft-extend with target aux states)."""
        cfg = self.config
        B, T = input_ids.shape
        embeds = self.embed_tokens(input_ids)
        if hidden_states.shape[-1] != embeds.shape[-1]:
            hidden_states = self.fc(hidden_states)
        positions, write_idx, mask = cache_geometry(lens, T)
        rope = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
        h = hidden_states
        for i, layer in enumerate(self.layers):
            h = layer(embeds, h, rope, (cache.k[i], cache.v[i]), write_idx, mask)
        return self.norm(h), h


class ToyEagle3Draft(nn.Module):
    """The draft (``LlamaForCausalLMEagle3``-like)."""

    d2t: torch.Tensor  # registered buffer (nn.Module.__getattr__ is typed ``Tensor | Module``)

    def __init__(self, cfg: ToyEagle3Config):
        super().__init__()
        self.config = cfg
        self.model = ToyEagle3Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.hot_token_id = torch.arange(cfg.draft_vocab_size)

    def set_d2t(self, d2t: torch.Tensor) -> None:
        self.d2t.copy_(d2t)
        # SGLang: d2t stores diffs between draft id and target id
        self.hot_token_id = self.d2t + torch.arange(self.d2t.shape[0])

    def set_embed(self, embed: nn.Embedding) -> None:
        """Share the target's (frozen) embedding, like SGLang's ``set_embed``."""
        self.model.embed_tokens = embed

    def forward(self, input_ids, hidden_states, cache: KVCache, lens):
        """Returns ``(draft-vocab logits [B,T,Dv], prenorm hidden [B,T,H])``."""
        normed, pre = self.model(input_ids, hidden_states, cache, lens)
        return self.lm_head(normed), pre

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        c = self.config
        return KVCache(c.num_hidden_layers, batch, max_len, c.num_attention_heads, c.head_dim)

    def load_state(self, sd: dict) -> None:
        sd = {
            k: v.float() if v.is_floating_point() else v
            for k, v in sd.items()
            if not k.startswith("model.embed_tokens.")
        }
        missing, unexpected = self.load_state_dict(sd, strict=False)
        missing = [m for m in missing if not m.startswith("model.embed_tokens.")]
        if missing or unexpected:
            raise ValueError(f"draft weights do not match: missing={missing} unexpected={unexpected}")
        self.set_d2t(self.d2t)
