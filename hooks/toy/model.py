"""A small Llama-style causal LM in plain torch, with SGLang/HF-like module names.

``ToyLlamaForCausalLM.set_eagle3_layers_to_capture`` mirrors SGLang 0.5.23 ``llama.py``: ids are
shifted by +1 and kept as given; the forward loop captures the residual stream at the *input* of
layer ``i`` (for ``i == 0`` the embedding output) if ``i in layers_to_capture``, in ascending layer
order, once per layer.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import Self


class HFStyleConfig:
    """config.json in Hugging Face's shape (what SGLang and SpecForge read), for a dataclass config."""

    ARCHITECTURE: ClassVar[str]
    hidden_size: int
    num_attention_heads: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)  # type: ignore[call-overload]  # subclasses are dataclasses
        d.update(
            architectures=[self.ARCHITECTURE],
            model_type="llama",
            num_key_value_heads=self.num_attention_heads,
            hidden_act="silu",
            tie_word_embeddings=False,
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**cls._known(**{k: v for k, v in d.items() if k in names}))

    @classmethod
    def _known(cls, **kw: Any) -> dict[str, Any]:
        """Last say over the known fields read from a config.json."""
        return kw

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(self.to_dict(), f, indent=2)

    @classmethod
    def load(cls, directory: str) -> Self:
        with open(os.path.join(directory, "config.json")) as f:
            return cls.from_dict(json.load(f))


@dataclass
class ToyLlamaConfig(HFStyleConfig):
    ARCHITECTURE: ClassVar[str] = "LlamaForCausalLM"

    hidden_size: int = 128
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    intermediate_size: int = 352
    vocab_size: int = 256
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 512
    torch_dtype: str = "float16"
    initializer_range: float = 0.02


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float):
    """cos/sin of shape ``[*positions.shape, head_dim]`` (HF rotate_half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[..., None] * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, T, h, d]; cos/sin [B, T, d]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * cos + rot * sin


class KVCache:
    """Static per-layer cache ``[B, max_len, heads, head_dim]`` with per-request lengths."""

    def __init__(self, num_layers: int, batch: int, max_len: int, heads: int, head_dim: int):
        self.k = [torch.zeros(batch, max_len, heads, head_dim) for _ in range(num_layers)]
        self.v = [torch.zeros(batch, max_len, heads, head_dim) for _ in range(num_layers)]
        self.max_len = max_len

    def select(self, idx: torch.Tensor) -> None:
        """Keep only the batch rows ``idx`` (retire finished requests)."""
        self.k = [t[idx] for t in self.k]
        self.v = [t[idx] for t in self.v]


class Attention(nn.Module):
    def __init__(self, in_dim: int, hidden: int, heads: int, theta: float):
        super().__init__()
        self.heads, self.head_dim, self.theta = heads, hidden // heads, theta
        self.q_proj = nn.Linear(in_dim, hidden, bias=False)
        self.k_proj = nn.Linear(in_dim, hidden, bias=False)
        self.v_proj = nn.Linear(in_dim, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, rope, cache_kv=None, write_idx=None, attn_mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.heads, self.head_dim)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache_kv is None:  # training / full causal
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
        else:
            ck, cv = cache_kv
            bidx, pidx = write_idx
            ck[bidx, pidx] = k
            cv[bidx, pidx] = v
            kl = attn_mask.shape[-1]
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                ck[:, :kl].transpose(1, 2),
                cv[:, :kl].transpose(1, 2),
                attn_mask=attn_mask,
            )
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ToyLlamaConfig):
        super().__init__()
        H = cfg.hidden_size
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.self_attn = Attention(H, H, cfg.num_attention_heads, cfg.rope_theta)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.mlp = MLP(H, cfg.intermediate_size)

    def forward(self, h, rope, cache_kv=None, write_idx=None, attn_mask=None):
        h = h + self.self_attn(self.input_layernorm(h), rope, cache_kv, write_idx, attn_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


def cache_geometry(lens: torch.Tensor, T: int):
    """Write indices and attention mask for ``T`` new tokens per request at ``lens_b + t``.

    Returns ``positions [B,T]``, ``(bidx, pidx)`` and a boolean mask ``[B,1,T,kl]``
    (key position < lens_b + t + 1).
    """
    B = lens.shape[0]
    ar = torch.arange(T)
    positions = lens[:, None] + ar
    bidx = torch.arange(B)[:, None].expand(B, T)
    kl = int(lens.max()) + T
    mask = torch.arange(kl)[None, None, :] < (positions + 1)[:, :, None]
    return positions, (bidx, positions), mask.unsqueeze(1)


class ToyLlamaModel(nn.Module):
    def __init__(self, cfg: ToyLlamaConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers_to_capture: list[int] = []

    def forward(self, input_ids, cache: KVCache | None = None, lens=None, capture=False):
        """Returns ``(normed_hidden [B,T,H], aux list)``; aux is empty unless ``capture``."""
        cfg = self.config
        B, T = input_ids.shape
        if cache is None:
            positions = torch.arange(T).expand(B, T)
            write_idx = mask = None
        else:
            positions, write_idx, mask = cache_geometry(lens, T)
        rope = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
        h = self.embed_tokens(input_ids)
        aux = []
        ltc = self.layers_to_capture if capture else ()
        for i, layer in enumerate(self.layers):
            if i in ltc:
                aux.append(h)
            kv = None if cache is None else (cache.k[i], cache.v[i])
            h = layer(h, rope, kv, write_idx, mask)
        return self.norm(h), aux


class ToyLlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ToyLlamaConfig):
        super().__init__()
        self.config = cfg
        self.model = ToyLlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.capture_aux_hidden_states = False
        self.apply(self._init)

    def _init(self, m):
        std = self.config.initializer_range
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)

    def set_eagle3_layers_to_capture(self, layer_ids: list[int] | None = None) -> None:
        """Mirror of SGLang 0.5.23 ``LlamaForCausalLM.set_eagle3_layers_to_capture``."""
        if layer_ids is None:
            self.capture_aux_hidden_states = True
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.capture_aux_hidden_states = True
            # in sglang, for the ith layer, it takes the output of the (i-1)th layer as aux
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

    def forward(self, input_ids, cache: KVCache | None = None, lens=None):
        """Returns ``(logits [B,T,V], hidden_to_store [B,T,*])``.

        With aux capture on, ``hidden_to_store`` is the concatenated aux states ``[B,T,K*H]``;
        otherwise it is the final (normed) hidden state ``[B,T,H]``.
        """
        h, aux = self.model(input_ids, cache, lens, capture=self.capture_aux_hidden_states)
        logits = self.lm_head(h)
        if self.capture_aux_hidden_states:
            return logits, (torch.cat(aux, dim=-1) if aux else h[..., :0])
        return logits, h

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        c = self.config
        return KVCache(c.num_hidden_layers, batch, max_len, c.num_attention_heads, c.head_dim)

    def all_hidden_states(self, input_ids):
        """HF-style ``hidden_states`` tuple (no final norm on any entry): ``[emb, out_0, ..., out_{n-1}]``.

        Entry ``k+1`` is the canonical id ``k`` (output of 0-based block k; ``-1`` = embedding).
        """
        cfg = self.config
        B, T = input_ids.shape
        positions = torch.arange(T).expand(B, T)
        rope = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
        h = self.model.embed_tokens(input_ids)
        outs = [h]
        for layer in self.model.layers:
            h = layer(h, rope)
            outs.append(h)
        return outs, self.lm_head(self.model.norm(h))


def load_target(path: str) -> ToyLlamaForCausalLM:
    """A target directory (config.json, model.pt) as the built-in engine runs it: fp32, eval mode,
    no gradients; the weights read with ``weights_only=True``."""
    model = ToyLlamaForCausalLM(ToyLlamaConfig.load(path))
    sd = torch.load(os.path.join(path, "model.pt"), weights_only=True)
    model.load_state_dict({k: v.float() for k, v in sd.items()})
    return model.eval().requires_grad_(False)
