"""Values produced on the serving path and materialised later, on the sender thread.

On CUDA the serving path only *starts* a non-blocking copy into pinned host memory and records an
event; the sender thread waits on that event. The forward pass never waits for the device. torch is
imported lazily: this module is part of the tracer, which a laptop without torch also imports.

Pinned buffers come from a small pool (``_PinnedPool``): allocating pinned memory per tensor per
step costs a ``cudaHostAlloc`` each time (tens of µs, and it can serialise with the device). A
buffer goes back to the pool once its copy has been waited for and its contents copied out.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any


class Deferred:
    """A value computed on the caller's path but materialised by the sender thread.

    A plain base class rather than a Protocol: the sender checks every body value, and an
    ``isinstance`` against a concrete class costs tens of nanoseconds, a runtime Protocol microseconds.
    """

    def resolve(self) -> Any:
        raise NotImplementedError


class _PinnedPool:
    """Reusable pinned host buffers (with their CUDA event), keyed by dtype and power-of-two size.

    ``take`` runs on the serving thread, ``give`` on the sender thread; deque append/pop are atomic.
    At most ``keep`` free buffers are kept per key; a buffer never given back (an event dropped from
    a full queue) is simply garbage collected.
    """

    MIN_ELEMS = 256

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._free: dict[tuple[Any, int], deque[tuple[Any, Any]]] = {}
        self._lock = threading.Lock()
        self.allocated = 0  # pinned buffers created (tests and benchmarks read it)

    def _key(self, dtype: Any, numel: int) -> tuple[Any, int]:
        n = max(numel, self.MIN_ELEMS)
        return dtype, 1 << (n - 1).bit_length()

    def take(self, dtype: Any, numel: int) -> tuple[tuple[Any, int], Any, Any]:
        import torch

        key = self._key(dtype, numel)
        q = self._free.get(key)
        if q:
            try:
                buf, event = q.pop()
                return key, buf, event
            except IndexError:
                pass
        with self._lock:
            self.allocated += 1
        return key, torch.empty(key[1], dtype=dtype, pin_memory=True), torch.cuda.Event()

    def give(self, key: tuple[Any, int], buf: Any, event: Any) -> None:
        q = self._free.get(key)
        if q is None:
            with self._lock:
                q = self._free.setdefault(key, deque())
        if len(q) < self.keep:
            q.append((buf, event))


PINNED = _PinnedPool()


class HostCopy(Deferred):
    """A tensor on its way to host memory; ``resolve()`` returns it as a numpy array (once)."""

    __slots__ = ("_host", "_event", "_buf", "_key", "_shape", "_numel")

    def __init__(self, tensor: Any) -> None:
        if tensor.device.type == "cuda":
            self._fill(tuple(tensor.shape), tensor.dtype, lambda host: host.copy_(tensor, non_blocking=True))
        else:
            # The engine may reuse its buffers in place; a CPU clone of a few kB is the safe choice.
            self._host = tensor.detach().clone()
            self._event: Any = None
            self._buf: Any = None
            self._key: Any = None

    @classmethod
    def written(cls, shape: tuple[int, ...], dtype: Any, write: Callable[[Any], Any]) -> HostCopy:
        """A pinned buffer that ``write(host)`` fills from the device: it queues the copy or kernel
        (``host`` is the pinned tensor, addressable from the device); the event follows it."""
        self = cls.__new__(cls)
        self._fill(shape, dtype, write)
        return self

    def _fill(self, shape: tuple[int, ...], dtype: Any, write: Callable[[Any], Any]) -> None:
        numel = math.prod(shape)
        key, buf, event = PINNED.take(dtype, numel)
        host = buf[:numel].view(shape)
        try:
            write(host)
        except BaseException:
            PINNED.give(key, buf, event)
            raise
        event.record()
        self._event, self._buf, self._key, self._host = event, buf, key, host

    def resolve(self) -> Any:
        if self._event is None:
            return self._host.numpy()
        wait_event(self._event)
        out = self._host.numpy().copy()  # the pinned buffer goes back to the pool
        PINNED.give(self._key, self._buf, self._event)
        self._event = None
        self._host = self._buf = None
        self._host = _Frozen(out)
        return out


def wait_event(event: Any) -> None:
    """Wait for a CUDA event by polling it between short sleeps. ``synchronize()`` would do, if it is
    sure to release the GIL for the whole wait; sleeping surely does, so the serving thread never
    waits on the device through us, and no CPU core spins."""
    delay = 5e-5
    while not event.query():
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


class _Frozen:
    """What a resolved CUDA HostCopy keeps: the copied-out array (resolve() may be called again)."""

    __slots__ = ("_a",)

    def __init__(self, a: Any) -> None:
        self._a = a

    def numpy(self) -> Any:
        return self._a
