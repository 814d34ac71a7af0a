"""The stand-in attention backend a target's layers call on a CPU (``StandInAttentionBackend``):
plain causal softmax attention per sequence with GQA, sliding window, logit cap and sink logits
(DeepSeek's MLA takes its MHA prefill path into it), and linear attention as a step-by-step Gated
DeltaNet from a zero state (``gated_delta_net_prefill``); no KV cache, one prefill only. Fresh
tensors: they never write into a residual stream, so the numbers may differ from a GPU's, but
nothing here can change what a capture slot aliases."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from eagle3_top.hooks.sglang.cpu_kernels import CALLS


def _positive(value: Any) -> int | None:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def gated_delta_net_prefill(
    layer: Any, mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, seq_lens: Iterable[int]
) -> torch.Tensor:
    """Gated DeltaNet (Qwen3-Next's linear attention) over each sequence from a zero state, in plain
    torch (the causal_conv1d + chunk_gated_delta_rule kernels' math, run step by step): causal
    depthwise conv with the layer's weights and activation, q/k L2-normalised, q scaled by
    ``1/sqrt(d_k)``, ``beta = sigmoid(b)``, ``g = -exp(A_log) * softplus(a + dt_bias)``, then per
    step ``S *= exp(g); S += k (beta (v - S^T k))^T; o = S^T q``. Returns ``[1, T, Hv, Dv]``."""
    n = mixed_qkv.shape[0]
    hq, hk, hv = int(layer.num_q_heads), int(layer.num_k_heads), int(layer.num_v_heads)
    dq, dk, dv = int(layer.head_q_dim), int(layer.head_k_dim), int(layer.head_v_dim)
    w = layer.conv_weights.float()
    w = w.reshape(w.shape[0], -1)
    bias = None if layer.bias is None else layer.bias.float()
    out = torch.empty(n, hv, dv, dtype=torch.float32)
    start = 0
    for length in seq_lens:
        x = mixed_qkv[start : start + length].float().t()[None]  # [1, D, L]
        y = F.conv1d(F.pad(x, (w.shape[1] - 1, 0)), w[:, None, :], bias, groups=w.shape[0])[0].t()
        if getattr(layer, "activation", "silu") in ("silu", "swish"):
            y = F.silu(y)
        q, k, v = torch.split(y, [hq * dq, hk * dk, hv * dv], dim=-1)
        q = F.normalize(q.reshape(length, hq, dq), dim=-1) * dq**-0.5
        k = F.normalize(k.reshape(length, hk, dk), dim=-1)
        v = v.reshape(length, hv, dv)
        q, k = q.repeat_interleave(hv // hq, dim=1), k.repeat_interleave(hv // hk, dim=1)
        beta = torch.sigmoid(b[start : start + length].float())
        g = -torch.exp(layer.A_log.float()) * F.softplus(
            a[start : start + length].float() + layer.dt_bias.float()
        )
        state = torch.zeros(hv, dk, dv)
        for t in range(length):
            state = state * torch.exp(g[t])[:, None, None]
            pred = torch.einsum("hkv,hk->hv", state, k[t])
            delta = (v[t] - pred) * beta[t][:, None]
            state = state + torch.einsum("hk,hv->hkv", k[t], delta)
            out[start + t] = torch.einsum("hkv,hk->hv", state, q[t])
        start += length
    return out[None].to(mixed_qkv.dtype)


class _NoKVPool:
    """Answers what layers read of a KV pool's description; holds nothing."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.store_dtype = dtype

    def set_kv_buffer(self, *args: Any, **kwargs: Any) -> None:
        """The cache write a layer makes before attention: nothing to keep for one prefill."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"stand-in attention backend: no KV pool ({name!r})")


class StandInAttentionBackend:
    """A tiny attention backend for one EXTEND (prefill) batch without a prefix: per sequence, plain
    causal softmax attention over the new tokens, with grouped KV heads, the layer's scaling,
    sliding window (``layer.sliding_window_size``) and logit cap, and sink logits when given
    (``sinks=``, GPT-OSS). Nothing is cached: it serves one prefill, no decode."""

    def __init__(self, seq_lens: Iterable[int], dtype: torch.dtype = torch.float32) -> None:
        self.seq_lens = [int(n) for n in seq_lens]
        # what layers ask of the pool before attention (e.g. whether to fuse the KV write): no pool
        self.token_to_kv_pool = _NoKVPool(dtype)
        self.req_to_token_pool = None
        # no per-runner backend name: models fall back to the server args' choice (DeepSeek's MLA)
        self.prefill_attention_backend_str = None
        self.decode_attention_backend_str = None

    def forward(
        self,
        q: torch.Tensor | None = None,
        k: torch.Tensor | None = None,
        v: torch.Tensor | None = None,
        layer: Any = None,
        forward_batch: Any = None,
        save_kv_cache: bool = True,
        **kwargs: Any,
    ) -> torch.Tensor:
        if "mixed_qkv" in kwargs:  # a linear-attention layer (RadixLinearAttention)
            CALLS["stand_in_linear_attention"] += 1
            out = gated_delta_net_prefill(layer, kwargs["mixed_qkv"], kwargs["a"], kwargs["b"], self.seq_lens)
            if kwargs.get("linear_attn_output") is not None:
                kwargs["linear_attn_output"].copy_(out.reshape(kwargs["linear_attn_output"].shape))
                return kwargs["linear_attn_output"]
            return out
        if q is None or k is None or v is None:
            raise NotImplementedError("stand-in attention: no KV cache (cross-layer KV sharing)")
        CALLS["stand_in_attention" + ("_with_sinks" if kwargs.get("sinks") is not None else "")] += 1
        hq, hk = int(layer.tp_q_head_num), int(layer.tp_k_head_num)
        dqk, dv = int(layer.qk_head_dim), int(layer.v_head_dim)
        # tokens: a [1, T, H, D] query (0.5.17's Gemma 3) is flattened, as the real backends do
        n = q.numel() // (hq * dqk)
        qh = q.reshape(n, hq, dqk).transpose(0, 1).float()
        kh = k.reshape(n, hk, dqk).transpose(0, 1).float()
        vh = v.reshape(n, -1, dv).transpose(0, 1).float()
        if vh.shape[0] != hq:
            vh = vh.repeat_interleave(hq // vh.shape[0], dim=0)
        if hk != hq:
            kh = kh.repeat_interleave(hq // hk, dim=0)
        scaling = float(getattr(layer, "scaling", 1.0 / math.sqrt(dqk)))
        cap = float(getattr(layer, "logit_cap", 0.0) or 0.0)
        window = _positive(getattr(layer, "sliding_window_size", None))
        sinks = kwargs.get("sinks")
        out = torch.empty(n, hq, dv, dtype=torch.float32)
        start = 0
        for length in self.seq_lens:
            sl = slice(start, start + length)
            s = qh[:, sl] @ kh[:, sl].transpose(1, 2) * scaling
            if cap > 0:
                s = cap * torch.tanh(s / cap)
            i = torch.arange(length)
            allowed = i[None, :] <= i[:, None]
            if window is not None:
                allowed &= (i[:, None] - i[None, :]) <= window
            s = s.masked_fill(~allowed, float("-inf"))
            if sinks is not None:
                sink = sinks.float().reshape(hq, 1, 1).expand(hq, length, 1)
                p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :length]
            else:
                p = torch.softmax(s, dim=-1)
            out[sl] = (p @ vh[:, sl]).transpose(0, 1)
            start += length
        return out.reshape(n, hq * dv).to(q.dtype)

    def __getattr__(self, name: str) -> Any:
        # what a model may ask of its backend beyond forward(): nothing known -> a clear error
        raise AttributeError(f"stand-in attention backend has no {name!r}")
