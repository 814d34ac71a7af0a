"""Values produced on the serving path and materialised later, on the sender thread.

On CUDA the serving path only *starts* a non-blocking copy into pinned host memory and records an
event; the sender thread waits on that event. The forward pass never waits for the device. torch is
imported lazily: this module is part of the tracer, which a laptop without torch also imports.
"""

from __future__ import annotations

from typing import Any


class Deferred:
    """A value computed on the caller's path but materialised by the sender thread.

    A plain base class rather than a Protocol: the sender checks every body value, and an
    ``isinstance`` against a concrete class costs tens of nanoseconds, a runtime Protocol microseconds.
    """

    def resolve(self) -> Any:
        raise NotImplementedError


class HostCopy(Deferred):
    """A tensor on its way to host memory; ``resolve()`` returns it as a numpy array."""

    __slots__ = ("_host", "_event")

    def __init__(self, tensor: Any) -> None:
        import torch

        if tensor.device.type == "cuda":
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._event: Any = event
        else:
            # The engine may reuse its buffers in place; a CPU clone of a few kB is the safe choice.
            host = tensor.detach().clone()
            self._event = None
        self._host = host

    def resolve(self) -> Any:
        if self._event is not None:
            self._event.synchronize()
        return self._host.numpy()
