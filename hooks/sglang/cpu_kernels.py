"""The GPU kernels SGLang's norm and activation layers call on their CUDA path (``sgl_kernel``),
emulated on a CPU to each kernel's contract: ``rmsnorm``, ``fused_add_rmsnorm`` and
``gemma_fused_add_rmsnorm`` (IN PLACE on both arguments: ``residual += input; input =
rmsnorm(residual) * weight``: the CUDA kernels' aliasing, which is what makes a captured tensor that
is also the residual change after its capture), ``gemma_rmsnorm``, ``silu_and_mul``,
``gelu_and_mul``, ``gelu_tanh_and_mul``, ``gelu_quick``. They compute in float32 and round once to
the tensor's dtype. ``KERNELS`` holds them counted (``CALLS``: evidence that a forward took the CUDA
path); ``cpu_emulation.install`` puts them where SGLang looks for them. What else is emulated, and
what is real SGLang code: ``cpu_emulation``."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


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
