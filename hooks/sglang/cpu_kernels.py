"""CPU stand-ins for the GPU kernels SGLang's targets call on their CUDA path, so that a real
SGLang model runs its CUDA code path on a CPU (``python -m eagle3_top.hooks.sglang.observe``).

What is real SGLang code and what is emulated when a target runs with these (``observe`` also
runs ``torch.compile`` helpers eagerly):

- **Real SGLang code**: the model classes and their construction (the model registry,
  ``_initialize_model``, the dummy loader's post-load steps), ``set_eagle3_layers_to_capture``, the
  decoder stack's ``forward`` with its capture loop, every decoder block's ``forward``, the residual
  plumbing (0.5.17's ``(hidden, residual)`` pairs; 0.5.22+'s ``attn_boundary`` / ``ffn_boundary``
  stages, ``ResidualStream``, ``AuxHiddenStateList`` / ``AuxHiddenStatePacker``), the embedding, the
  linear layers (their unquantized torch path), rotary embeddings and MoE routing (their native
  paths), and the ``forward_cuda`` methods of the norm and activation modules (``RMSNorm``,
  ``GemmaRMSNorm``, ``SiluAndMul``, ``GeluAndMul``, ...: ``use_cuda_path``), with their branching.
- **Emulated, to each kernel's contract** (set on the stand-in ``sgl_kernel`` and bound where each
  release's ``layernorm.py`` / ``activation.py`` bind them only when ``is_cuda()``): ``rmsnorm``,
  ``fused_add_rmsnorm`` and ``gemma_fused_add_rmsnorm`` (IN PLACE on both arguments:
  ``residual += input; input = rmsnorm(residual) * weight``: the CUDA kernels' aliasing, which is
  what makes a captured tensor that is also the residual change after its capture),
  ``gemma_rmsnorm``, ``silu_and_mul``, ``gelu_and_mul``, ``gelu_tanh_and_mul``, ``gelu_quick``. They
  compute in float32 and round once to the tensor's dtype.
- **Emulated Triton launchers** (SGLang functions that launch a Triton kernel, replaced where they
  are defined and where they were imported by name; ``triton.cdiv`` / ``next_power_of_2`` made real
  on the stand-in): ``fused_qkvzba_split_reshape_cat`` (a reshuffle into fresh tensors),
  ``rms_norm_gated`` (a fresh tensor), ``fused_gate_sigmoid_mul_add`` (IN PLACE on the MoE output,
  as the kernel) and ``fused_gate_sigmoid_mul``: all Qwen3-Next.
- **Simpler paths (fresh tensors: they never write into a residual stream)**: attention goes to
  ``StandInAttentionBackend`` (plain causal softmax attention per sequence with GQA, sliding window,
  logit cap and sink logits; DeepSeek's MLA takes its MHA prefill path into it; linear attention is
  a step-by-step Gated DeltaNet from a zero state, ``gated_delta_net_prefill``; no KV cache, one
  prefill only). The unquantized MoE runs SGLang's native ``moe_forward_native``; for a router
  that weights the expert input (Llama 4) it is given ``x * w`` and unit weights (``_install_moe``).
  Where 0.5.17's CPU MoE fallback refuses a non-SiLU expert activation (Gemma 4's GELU), the
  native path it would have called is called (``_install_moe_cpu_activation``). Qwen3.5's
  launchers are emulated as Qwen3-Next's: ``fused_qkvzba_split_reshape_cat_contiguous`` (fresh
  tensors), ``fused_sigmoid_mul`` (IN PLACE on the attention output with ``inplace``, as the
  kernel) and fla ``layernorm_gated._layer_norm_fwd`` (its gated norm; a fresh tensor or ``out``).
  Their numbers differ from a GPU's, but references and slots come from the same run, and none of
  them can change what a capture slot aliases.
- **CPU handles for CUDA-only objects**: where a release creates a named CUDA stream whatever the
  device (``runtime_context.get_stream`` before 0.5.23; LongCat-Flash asks for one while it is
  built), a CPU stream, as 0.5.23 creates for ``--device cpu`` (``_install_cpu_streams``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from eagle3_top.hooks.sglang.cpu_standins import StandIn, install_standins

# -- the kernels -------------------------------------------------------------------------------------


def _rms_scale(x32: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)


def _put(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return result
    out.copy_(result)
    return out


def rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    enable_pdl: bool | None = None,
) -> torch.Tensor:
    """sgl_kernel.rmsnorm: ``out = input / sqrt(mean(input^2) + eps) * weight`` (new tensor, or ``out``)."""
    x = input.float()
    y = (x * _rms_scale(x, eps) * weight.float()).to(input.dtype)
    return _put(y, out)


def fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: bool | None = None,
) -> None:
    """sgl_kernel.fused_add_rmsnorm, IN PLACE on both arguments: ``residual += input``, then
    ``input = rmsnorm(residual) * weight``. Returns nothing, as the kernel."""
    x = input.float() + residual.float()
    residual.copy_(x.to(residual.dtype))
    input.copy_((x * _rms_scale(x, eps) * weight.float()).to(input.dtype))


def gemma_rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
    enable_pdl: bool | None = None,
) -> torch.Tensor:
    """sgl_kernel.gemma_rmsnorm: ``out = input / sqrt(mean(input^2) + eps) * (1 + weight)``."""
    x = input.float()
    y = (x * _rms_scale(x, eps) * (1.0 + weight.float())).to(input.dtype)
    return _put(y, out)


def gemma_fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: bool | None = None,
) -> None:
    """sgl_kernel.gemma_fused_add_rmsnorm, IN PLACE: ``residual += input``, then
    ``input = rmsnorm(residual) * (1 + weight)``."""
    x = input.float() + residual.float()
    residual.copy_(x.to(residual.dtype))
    input.copy_((x * _rms_scale(x, eps) * (1.0 + weight.float())).to(input.dtype))


def _act_and_mul(
    act: Callable[[torch.Tensor], torch.Tensor], input: torch.Tensor, out: torch.Tensor | None
) -> torch.Tensor:
    d = input.shape[-1] // 2
    x = input.float()
    y = (act(x[..., :d]) * x[..., d:]).to(input.dtype)
    return _put(y, out)


def silu_and_mul(
    input: torch.Tensor, out: torch.Tensor | None = None, enable_pdl: bool | None = None
) -> torch.Tensor:
    """sgl_kernel.silu_and_mul: ``silu(input[..., :d]) * input[..., d:]`` into ``out`` (or a new tensor)."""
    return _act_and_mul(F.silu, input, out)


def gelu_and_mul(
    input: torch.Tensor, out: torch.Tensor | None = None, enable_pdl: bool | None = None
) -> torch.Tensor:
    """sgl_kernel.gelu_and_mul: exact (erf) GELU of the first half times the second half."""
    return _act_and_mul(F.gelu, input, out)


def gelu_tanh_and_mul(
    input: torch.Tensor, out: torch.Tensor | None = None, enable_pdl: bool | None = None
) -> torch.Tensor:
    """sgl_kernel.gelu_tanh_and_mul: tanh-approximated GELU of the first half times the second half."""
    return _act_and_mul(lambda t: F.gelu(t, approximate="tanh"), input, out)


def gelu_quick(
    input: torch.Tensor, out: torch.Tensor | None = None, enable_pdl: bool | None = None
) -> torch.Tensor:
    """sgl_kernel.gelu_quick: ``x * sigmoid(1.702 x)``."""
    x = input.float()
    return _put((x * torch.sigmoid(1.702 * x)).to(input.dtype), out)


# calls per kernel since the last ``CALLS.clear()``: evidence that a forward took the CUDA path
CALLS: Counter[str] = Counter()


def _counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS[fn.__name__] += 1
        return fn(*args, **kwargs)

    return wrapper


KERNELS: dict[str, Callable[..., Any]] = {
    fn.__name__: _counted(fn)
    for fn in (
        rmsnorm,
        fused_add_rmsnorm,
        gemma_rmsnorm,
        gemma_fused_add_rmsnorm,
        silu_and_mul,
        gelu_and_mul,
        gelu_tanh_and_mul,
        gelu_quick,
    )
}

# Where each release's layers bind these names, under ``if _is_cuda:`` (so absent on a CPU).
BINDINGS: dict[str, tuple[str, ...]] = {
    "sglang.srt.layers.layernorm": (
        "rmsnorm",
        "fused_add_rmsnorm",
        "gemma_rmsnorm",
        "gemma_fused_add_rmsnorm",
    ),
    "sglang.srt.layers.activation": ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "gelu_quick"),
}

# The modules whose CustomOp classes take ``forward_cuda`` under ``use_cuda_path``.
CUDA_PATH_MODULES = ("sglang.srt.layers.layernorm", "sglang.srt.layers.activation")


def _is_standin(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, StandIn)


def install() -> list[str]:
    """Install the stand-ins (if not yet), put the kernels on the stand-in ``sgl_kernel``, and bind
    them in the SGLang modules that import them only on CUDA. Returns the ``module.name`` bindings
    made. Idempotent."""
    install_standins()
    sgl_kernel = importlib.import_module("sgl_kernel")
    for name, fn in KERNELS.items():
        setattr(sgl_kernel, name, fn)
    bound = []
    for modname, names in BINDINGS.items():
        mod = importlib.import_module(modname)
        for name in names:
            if name not in mod.__dict__ or _is_standin(mod.__dict__[name]):
                setattr(mod, name, KERNELS[name])
                bound.append(f"{modname}.{name}")
    # a module that imported a kernel at its top level before this ran holds the stand-in class
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("sglang.") or mod is None:
            continue
        for name, fn in KERNELS.items():
            if _is_standin(getattr(mod, "__dict__", {}).get(name)):
                setattr(mod, name, fn)
                bound.append(f"{modname}.{name}")
    bound += _install_moe()
    bound += _install_triton_launchers()
    bound += _install_cpu_streams()
    return bound


def _install_cpu_streams() -> list[str]:
    """SGLang's named process streams (``runtime_context.get_stream``): 0.5.17-0.5.22 create a CUDA
    stream whatever the device, a GPU-only call some models make while they are built (LongCat-Flash's
    ``get_stream("alt")``); 0.5.23 creates the device's own stream. Where the CUDA stream cannot be
    made (no GPU), the stream is a CPU stream, as 0.5.23 makes for ``--device cpu``: a handle the
    model keeps. A model that then launches work on it through ``torch.cuda`` still fails here, as
    a CUDA-only call (not observable)."""
    try:
        rc = importlib.import_module("sglang.srt.runtime_context")
    except ImportError:
        return []
    ctx = getattr(rc, "_CONTEXT", None)
    if ctx is None:
        return []
    cls: Any = type(ctx)
    original = getattr(cls, "get_stream", None)
    if original is None or getattr(original, "_cpu_stream_fallback", False):
        return []

    @functools.wraps(original)
    def get_stream(self: Any, name: str) -> Any:
        try:
            return original(self, name)
        except (RuntimeError, AssertionError, AttributeError):
            if torch.cuda.is_available():
                raise
            CALLS["cpu_stream"] += 1
            stream = torch.cpu.Stream()
            self.resources.streams[name] = stream
            return stream

    get_stream._cpu_stream_fallback = True  # type: ignore[attr-defined]
    cls.get_stream = get_stream
    return [f"{rc.__name__}.{cls.__name__}.get_stream"]


# -- MoE ---------------------------------------------------------------------------------------------


def _install_moe() -> list[str]:
    """Let SGLang's native MoE (``fused_moe_native.moe_forward_native``, what its unquantized MoE
    runs off CUDA) serve routers that weight the expert INPUT (Llama 4: top-1, ``x * w`` into the
    expert, the output unweighted), which the native path refuses; everything else goes to the
    native path unchanged. The result is a fresh tensor, as the fused CUDA kernel's."""
    try:
        native = importlib.import_module("sglang.srt.layers.moe.fused_moe_native")
    except ImportError:
        return []
    orig = getattr(native, "moe_forward_native", None)
    if orig is None or getattr(orig, "_e3t_wrapped", False):
        return []

    @functools.wraps(orig)
    def moe_forward_native(layer: Any, x: torch.Tensor, topk_output: Any, moe_runner_config: Any) -> Any:
        if not getattr(moe_runner_config, "apply_router_weight_on_input", False):
            return orig(layer, x, topk_output, moe_runner_config)
        weights, ids = topk_output[0], topk_output[1]
        if ids.shape[-1] != 1:
            raise NotImplementedError("router weight on the expert input needs top-1 routing")
        CALLS["moe_router_weight_on_input"] += 1
        x = x * weights.to(x.dtype)
        ones = torch.ones_like(weights)
        topk = type(topk_output)(ones, ids, *tuple(topk_output)[2:])
        config = dataclasses.replace(moe_runner_config, apply_router_weight_on_input=False)
        return orig(layer, x, topk, config)

    moe_forward_native._e3t_wrapped = True  # type: ignore[attr-defined]
    setattr(native, "moe_forward_native", moe_forward_native)  # noqa: B010
    return ["sglang.srt.layers.moe.fused_moe_native.moe_forward_native", *_install_moe_cpu_activation()]


def _install_moe_cpu_activation() -> list[str]:
    """0.5.17's unquantized MoE CPU fallback (``UnquantizedFusedMoEMethod.forward_cpu``) asserts a
    SiLU expert activation before it calls the native path, which (like the GPU kernels, and 0.5.18+'s
    CPU fallback) also serves GELU (Gemma 4): for another activation refused there, the native path
    is called as that fallback would call it."""
    try:
        unquant = importlib.import_module("sglang.srt.layers.quantization.unquant")
    except ImportError:
        return []
    cls = getattr(unquant, "UnquantizedFusedMoEMethod", None)
    orig = getattr(cls, "forward_cpu", None)
    if orig is None or getattr(orig, "_e3t_wrapped", False):
        return []

    @functools.wraps(orig)
    def forward_cpu(self: Any, layer: Any, dispatch_output: Any) -> Any:
        act = getattr(getattr(self, "moe_runner_config", None), "activation", "silu")
        try:
            return orig(self, layer, dispatch_output)
        except AssertionError as exc:
            if act == "silu" or "is not supported" not in str(exc):
                raise
        from sglang.srt.layers.moe.token_dispatcher import StandardCombineInput

        CALLS[f"moe_native_{act}"] += 1
        native = importlib.import_module("sglang.srt.layers.moe.fused_moe_native")
        out = native.moe_forward_native(
            layer, dispatch_output.hidden_states, dispatch_output.topk_output, self.moe_runner_config
        )
        return StandardCombineInput(hidden_states=out)

    forward_cpu._e3t_wrapped = True  # type: ignore[attr-defined]
    bound = []
    for name in ("forward_cpu", "forward_native"):  # 0.5.17: ``forward_native = forward_cpu``
        if cls.__dict__.get(name) is orig:
            setattr(cls, name, forward_cpu)
            bound.append(f"sglang.srt.layers.quantization.unquant.UnquantizedFusedMoEMethod.{name}")
    return bound


def _defines_forward_cuda(cls: type) -> bool:
    for klass in cls.__mro__:
        if klass.__module__ in CUDA_PATH_MODULES and "forward_cuda" in klass.__dict__:
            return True
    return False


def use_cuda_path(model: torch.nn.Module) -> list[str]:
    """Make the norm and activation ops of ``model`` (SGLang's ``MultiPlatformOp`` / ``BaseFusedOp``
    classes from ``layers/layernorm.py`` and ``layers/activation.py``) dispatch to their
    ``forward_cuda``, as on a GPU. Returns the class names switched."""
    switched = set()
    for m in model.modules():
        cls = type(m)
        if not hasattr(m, "_forward_method") or not _defines_forward_cuda(cls):
            continue
        m._forward_method = m.forward_cuda
        switched.add(cls.__name__)
    return sorted(switched)


# -- attention ---------------------------------------------------------------------------------------


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
