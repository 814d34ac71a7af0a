"""SGLang functions that launch a Triton kernel, emulated on a CPU to each kernel's contract and
replaced where they are defined and where they were imported by name (``triton.cdiv`` /
``next_power_of_2`` made real on the stand-in ``triton``): ``fused_qkvzba_split_reshape_cat`` (a
reshuffle into fresh tensors), ``rms_norm_gated`` (a fresh tensor), ``fused_gate_sigmoid_mul_add``
(IN PLACE on the MoE output, as the kernel) and ``fused_gate_sigmoid_mul``: all Qwen3-Next; and
Qwen3.5's, as Qwen3-Next's: ``fused_qkvzba_split_reshape_cat_contiguous`` (fresh tensors),
``fused_sigmoid_mul`` (IN PLACE on the attention output with ``inplace``, as the kernel) and fla
``layernorm_gated._layer_norm_fwd`` (its gated norm; a fresh tensor or ``out``). Their numbers differ
from a GPU's, but references and slots come from the same run, and none of them can change what a
capture slot aliases."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from eagle3_top.hooks.sglang.cpu_kernels import _counted, _put, _rms_scale


def fused_qkvzba_split_reshape_cat(
    mixed_qkvz: torch.Tensor,
    mixed_ba: torch.Tensor,
    num_heads_qk: int,
    num_heads_v: int,
    head_qk: int,
    head_v: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Triton kernel of that name (Qwen3-Next): per head group ``[q, k, v, z]`` interleaved in
    ``mixed_qkvz`` and ``[b, a]`` in ``mixed_ba`` -> ``mixed_qkv = [all q | all k | all v]``,
    ``z [T, Hv, Dv]``, ``b``, ``a [T, Hv]`` (fresh tensors)."""
    n = mixed_qkvz.shape[0]
    r = num_heads_v // num_heads_qk
    g = mixed_qkvz.reshape(n, num_heads_qk, 2 * head_qk + 2 * r * head_v)
    q, k, v, z = torch.split(g, [head_qk, head_qk, r * head_v, r * head_v], dim=-1)
    mixed_qkv = torch.cat([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], dim=-1)
    ba = mixed_ba.reshape(n, num_heads_qk, 2 * r)
    b, a = ba[..., :r].reshape(n, num_heads_v), ba[..., r:].reshape(n, num_heads_v)
    return (
        mixed_qkv.contiguous(),
        z.reshape(n, num_heads_v, head_v).contiguous(),
        b.contiguous(),
        a.contiguous(),
    )


def fused_qkvzba_split_reshape_cat_contiguous(
    mixed_qkvz: torch.Tensor,
    mixed_ba: torch.Tensor,
    num_heads_qk: int,
    num_heads_v: int,
    head_qk: int,
    head_v: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Triton kernel of that name (Qwen3.5): ``mixed_qkvz = [all q | all k | all v | all z]``
    and ``mixed_ba = [all b | all a]`` -> ``mixed_qkv = [all q | all k | all v]``, ``z [T, Hv, Dv]``,
    ``b``, ``a [T, Hv]`` (fresh tensors)."""
    n = mixed_qkvz.shape[0]
    qkv_dim = 2 * num_heads_qk * head_qk + num_heads_v * head_v
    return (
        mixed_qkvz[:, :qkv_dim].contiguous(),
        mixed_qkvz[:, qkv_dim : qkv_dim + num_heads_v * head_v].reshape(n, num_heads_v, head_v).contiguous(),
        mixed_ba[:, :num_heads_v].contiguous(),
        mixed_ba[:, num_heads_v : 2 * num_heads_v].contiguous(),
    )


def fused_sigmoid_mul(
    attn_output: torch.Tensor, gate: torch.Tensor, inplace: bool = False, quant: bool = False
) -> torch.Tensor:
    """The Triton kernel of that name (Qwen3.5's attention output gate): ``attn_output *
    sigmoid(gate)`` (a 3D ``[T, heads, head_dim]`` gate read as ``[T, hidden]``), IN PLACE on
    ``attn_output`` with ``inplace``, else a new tensor. The FP8 ``quant`` output is not emulated."""
    if quant:
        raise NotImplementedError("fused_sigmoid_mul: the FP8 quantized output is not emulated")
    g = gate.reshape(attn_output.shape).float()
    y = (attn_output.float() * torch.sigmoid(g)).to(attn_output.dtype)
    return _put(y, attn_output if inplace else None)


def rms_norm_gated(
    x: torch.Tensor,
    g: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str = "swish",
    residual: torch.Tensor | None = None,
    eps: float = 1e-6,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
) -> Any:
    """fla's ``rms_norm_gated`` (norm before gate): ``rmsnorm(x [+ residual]) * weight (+ bias) *
    act(g)``, act silu/swish or sigmoid; a new tensor (and the summed residual with ``prenorm``)."""
    x32 = x.float()
    if residual is not None:
        x32 = x32 + residual.float()
    y = x32 * _rms_scale(x32, eps) * weight.float()
    if bias is not None:
        y = y + bias.float()
    gate = torch.sigmoid(g.float()) if activation == "sigmoid" else F.silu(g.float())
    out = (y * gate).to(x.dtype)
    if prenorm:
        return out, (x32 if residual_in_fp32 else x32.to(x.dtype))
    return out


def layer_norm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    z: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
    activation: str = "swish",
    quant_heads: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """fla ``layernorm_gated._layer_norm_fwd`` (the launcher behind its gated ``RMSNorm`` /
    ``LayerNorm``, Qwen3.5's linear-attention output norm): per row of ``x [M, N]`` and group of
    ``group_size`` columns, (RMS or layer) norm times ``weight`` (+ ``bias``), gated by ``act(z)``
    after the norm (``norm_before_gate``) or on its input; ``z`` may be ``[T, heads, N]`` for
    ``M = T * heads`` rows. Returns ``(y, mean, rstd)`` (``y`` into ``out`` when given, else a new
    tensor; ``mean`` None for RMS norm), as the launcher. The FP8 ``quant_heads`` output is not emulated."""
    if quant_heads:
        raise NotImplementedError("layernorm_gated: the FP8 quantized output is not emulated")
    m, n = x.shape
    gs = int(group_size or n)
    groups = n // gs
    x32 = x.float()
    gate = None
    if z is not None:
        z32 = z.reshape(m, n).float()
        gate = torch.sigmoid(z32) if activation == "sigmoid" else F.silu(z32)
        if not norm_before_gate:
            x32 = x32 * gate
    xg = x32.reshape(m, groups, gs)
    mean = None if is_rms_norm else xg.mean(dim=-1)
    xbar = xg if mean is None else xg - mean[..., None]
    rstd = torch.rsqrt(xbar.pow(2).mean(dim=-1) + eps)
    y = (xbar * rstd[..., None]).reshape(m, n) * weight.float()
    if bias is not None:
        y = y + bias.float()
    if gate is not None and norm_before_gate:
        y = y * gate
    y_out = _put(y.to(x.dtype), out)
    return y_out, (None if mean is None else mean.t().reshape(-1)), rstd.t().reshape(-1)


def fused_gate_sigmoid_mul_add(
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
    final_hidden_states: torch.Tensor,
) -> None:
    """The Triton kernel of that name (shared-expert gate), IN PLACE on ``final_hidden_states``:
    ``final += sigmoid(hidden @ gate_weight)[:, None] * shared``."""
    gate = torch.sigmoid((hidden_states.float() * gate_weight.float()).sum(-1, keepdim=True))
    final_hidden_states.copy_(
        (final_hidden_states.float() + gate * shared_output.float()).to(final_hidden_states.dtype)
    )


def fused_gate_sigmoid_mul(
    hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor
) -> torch.Tensor:
    """The Triton kernel of that name: ``sigmoid(hidden @ gate_weight)[:, None] * shared`` (new tensor)."""
    gate = torch.sigmoid((hidden_states.float() * gate_weight.float()).sum(-1, keepdim=True))
    return (gate * shared_output.float()).to(shared_output.dtype)


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


# Triton kernels' launchers (SGLang code that launches a Triton kernel): name -> CPU version
TRITON_LAUNCHERS: dict[str, dict[str, Callable[..., Any]]] = {
    "sglang.kernels.ops.attention.triton_gdn_fused_proj": {
        "fused_qkvzba_split_reshape_cat": fused_qkvzba_split_reshape_cat,
        "fused_qkvzba_split_reshape_cat_contiguous": fused_qkvzba_split_reshape_cat_contiguous,
    },
    "sglang.kernels.ops.attention.fla.fused_norm_gate": {"rms_norm_gated": rms_norm_gated},
    "sglang.kernels.ops.attention.fla.layernorm_gated": {"_layer_norm_fwd": layer_norm_fwd},
    "sglang.kernels.ops.elementwise.elementwise": {
        "fused_gate_sigmoid_mul_add": fused_gate_sigmoid_mul_add,
        "fused_gate_sigmoid_mul": fused_gate_sigmoid_mul,
        "fused_sigmoid_mul": fused_sigmoid_mul,
    },
}


def _install_triton_launchers() -> list[str]:
    """Triton's host helpers (``cdiv``, ``next_power_of_2``) on the stand-in ``triton``, and the
    launchers above replaced, both in their module and wherever a loaded SGLang module imported
    them by name."""
    triton = importlib.import_module("triton")
    triton.cdiv = _cdiv  # type: ignore[attr-defined]
    triton.next_power_of_2 = _next_power_of_2  # type: ignore[attr-defined]
    bound = []
    for modname, fns in TRITON_LAUNCHERS.items():
        try:
            mod = importlib.import_module(modname)
        except Exception:  # not in this release
            continue
        for name, fn in fns.items():
            orig = mod.__dict__.get(name)
            if orig is None or orig is fn:
                continue
            counted = _counted(fn)
            for other_name, other in list(sys.modules.items()):
                if other is not None and other_name.startswith("sglang") and other.__dict__.get(name) is orig:
                    setattr(other, name, counted)
                    bound.append(f"{other_name}.{name}")
    return bound
