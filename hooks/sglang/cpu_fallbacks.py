"""SGLang's own CPU paths, let through where they refuse what the GPU path serves, and CPU handles
for CUDA-only objects. The unquantized MoE runs SGLang's native ``moe_forward_native``; for a router
that weights the expert input (Llama 4) it is given ``x * w`` and unit weights (``_install_moe``).
Where 0.5.17's CPU MoE fallback refuses a non-SiLU expert activation (Gemma 4's GELU), the native
path it would have called is called (``_install_moe_cpu_activation``). Where a release creates a
named CUDA stream whatever the device (``runtime_context.get_stream`` before 0.5.23; LongCat-Flash
asks for one while it is built), a CPU stream, as 0.5.23 creates for ``--device cpu``
(``_install_cpu_streams``)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any

import torch
from eagle3_top.hooks.sglang.cpu_kernels import CALLS


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
