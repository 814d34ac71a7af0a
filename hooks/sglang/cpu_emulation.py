"""The CPU emulation of what SGLang's targets call on their CUDA path, put in place (``install``), so
that a real SGLang model runs its CUDA code path on a CPU (``python -m eagle3_top.hooks.sglang.observe``).

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
  compute in float32 and round once to the tensor's dtype (``cpu_kernels``).
- **Emulated Triton launchers** (SGLang functions that launch a Triton kernel, replaced where they
  are defined and where they were imported by name; ``triton.cdiv`` / ``next_power_of_2`` made real
  on the stand-in): ``fused_qkvzba_split_reshape_cat`` (a reshuffle into fresh tensors),
  ``rms_norm_gated`` (a fresh tensor), ``fused_gate_sigmoid_mul_add`` (IN PLACE on the MoE output,
  as the kernel) and ``fused_gate_sigmoid_mul``: all Qwen3-Next (``cpu_triton``).
- **Simpler paths (fresh tensors: they never write into a residual stream)**: attention goes to
  ``StandInAttentionBackend`` (plain causal softmax attention per sequence with GQA, sliding window,
  logit cap and sink logits; DeepSeek's MLA takes its MHA prefill path into it; linear attention is
  a step-by-step Gated DeltaNet from a zero state, ``gated_delta_net_prefill``; no KV cache, one
  prefill only; ``cpu_attention``). The unquantized MoE runs SGLang's native
  ``moe_forward_native``; for a router that weights the expert input (Llama 4) it is given
  ``x * w`` and unit weights (``_install_moe``, ``cpu_fallbacks``). Where 0.5.17's CPU MoE fallback
  refuses a non-SiLU expert activation (Gemma 4's GELU), the native path it would have called is
  called (``_install_moe_cpu_activation``). Qwen3.5's launchers are emulated as Qwen3-Next's
  (``cpu_triton``): ``fused_qkvzba_split_reshape_cat_contiguous`` (fresh tensors),
  ``fused_sigmoid_mul`` (IN PLACE on the attention output with ``inplace``, as the kernel) and fla
  ``layernorm_gated._layer_norm_fwd`` (its gated norm; a fresh tensor or ``out``). Their numbers
  differ from a GPU's, but references and slots come from the same run, and none of them can
  change what a capture slot aliases.
- **CPU handles for CUDA-only objects**: where a release creates a named CUDA stream whatever the
  device (``runtime_context.get_stream`` before 0.5.23; LongCat-Flash asks for one while it is
  built), a CPU stream, as 0.5.23 creates for ``--device cpu`` (``_install_cpu_streams``,
  ``cpu_fallbacks``).

``install`` puts all of it in place (idempotent); ``use_cuda_path`` switches a model's norm and
activation ops to their ``forward_cuda``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch
from eagle3_top.hooks.sglang.cpu_fallbacks import _install_cpu_streams, _install_moe
from eagle3_top.hooks.sglang.cpu_kernels import KERNELS
from eagle3_top.hooks.sglang.cpu_standins import StandIn, install_standins
from eagle3_top.hooks.sglang.cpu_triton import _install_triton_launchers

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
