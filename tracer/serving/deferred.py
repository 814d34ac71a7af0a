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

    def ready(self) -> bool:
        """Whether ``resolve()`` would return without waiting for the device."""
        return True

    def span(self) -> Span:
        """The host bytes as they lie, for a ``memmove`` out (``array_span``); only once ``ready()``.
        Host copies override it to hand out their buffers without a numpy object."""
        return array_span(self.resolve())


# (address, byte count, element count, numpy type char as int, the object that owns the bytes):
# what the ring's step record copies from, with no numpy object made per column per step
Span = tuple[int, int, int, int, Any]
_TYPES: dict[Any, tuple[int, int]] = {}  # torch dtype -> (numpy type char, item size): a handful


def array_span(a: Any) -> Span:
    """A numpy array's span (a contiguous copy first where it is not)."""
    import numpy as np

    a = np.ascontiguousarray(a)
    return a.__array_interface__["data"][0], a.nbytes, a.size, ord(a.dtype.char), a


def tensor_span(t: Any) -> Span:
    """A host tensor's span, read from the tensor itself: ``Tensor.numpy()`` makes a numpy object
    (about a microsecond on the cold serving thread) and SGLang's host copies are new each step."""
    if t.is_cuda:  # a device address handed to memmove would take the serving process down
        raise ValueError("a step column still on the device reached the ring")
    types = _TYPES.get(t.dtype)
    if types is None:
        a = t.reshape(-1)[:0].numpy()  # once per dtype: the char numpy would give the column
        types = _TYPES[t.dtype] = (ord(a.dtype.char), a.dtype.itemsize)
    if not t.is_contiguous():
        return array_span(t.numpy())
    count = t.numel()
    return t.data_ptr(), count * types[1], count, types[0], t


class _Pinned:
    """One pooled pinned buffer, its CUDA event, and its leading views by length (made once: a
    slice costs the serving thread a microsecond or two on a busy host)."""

    __slots__ = ("buf", "event", "_views", "_spans")

    def __init__(self, buf: Any, event: Any) -> None:
        self.buf, self.event = buf, event
        self._views: dict[int, Any] = {}
        self._spans: dict[int, Span] = {}

    def span(self, numel: int) -> Span:
        """The leading ``numel`` elements' span (made once per length, like ``array``)."""
        s = self._spans.get(numel)
        if s is None:
            if len(self._spans) >= 8:
                self._spans.clear()
            addr, _, _, char, _ = tensor_span(self.buf)
            s = self._spans[numel] = (addr, numel * self.buf.element_size(), numel, char, self.buf)
        return s

    def view(self, numel: int) -> Any:
        v = self._views.get(numel)
        if v is None:
            if len(self._views) >= 8:
                self._views.clear()
            v = self._views[numel] = self.buf[:numel]
        return v


class _PinnedPool:
    """Reusable pinned host buffers (with their CUDA event), keyed by dtype and power-of-two size.

    ``take`` runs on the serving thread, ``give`` on the sender thread; deque append/pop are atomic.
    At most ``keep`` free buffers are kept per key; a buffer never given back (an event dropped from
    a full queue) is simply garbage collected.
    """

    MIN_ELEMS = 256

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._free: dict[tuple[Any, int], deque[_Pinned]] = {}
        self._lock = threading.Lock()
        self.allocated = 0  # pinned buffers created (tests and benchmarks read it)

    def _key(self, dtype: Any, numel: int) -> tuple[Any, int]:
        n = max(numel, self.MIN_ELEMS)
        return dtype, 1 << (n - 1).bit_length()

    def take(self, dtype: Any, numel: int) -> tuple[tuple[Any, int], _Pinned]:
        key = self._key(dtype, numel)
        q = self._free.get(key)
        if q:
            try:
                return key, q.pop()
            except IndexError:
                pass
        import torch

        with self._lock:
            self.allocated += 1
        return key, _Pinned(torch.empty(key[1], dtype=dtype, pin_memory=True), torch.cuda.Event())

    def give(self, key: tuple[Any, int], entry: _Pinned) -> None:
        q = self._free.get(key)
        if q is None:
            with self._lock:
                q = self._free.setdefault(key, deque())
        if len(q) < self.keep:
            q.append(entry)


PINNED = _PinnedPool()


def _raw_stream(tensor: Any) -> Any:
    """The calling thread's current CUDA stream for ``tensor``'s device, as a raw handle (an int:
    cheaper than a Stream object), or None where this torch does not expose it."""
    import torch

    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is None:
        return None
    device = tensor.get_device()
    return get(device), device


class HostCopy(Deferred):
    """A tensor on its way to host memory; ``resolve()`` returns it as a numpy array (once).

    ``record=False`` leaves out the CUDA event after the copy (an event record costs the serving
    thread ~5 µs on a busy host): the caller then ``bind``s an event of the engine's that follows
    the copy in stream order, or ``seal``s the copy (an event recorded then, on the stream the copy
    was queued on). A copy that is neither refuses to resolve rather than return unfinished data.
    """

    __slots__ = ("_host", "_wait", "_entry", "_key", "_stream", "_numel")

    def __init__(self, tensor: Any, record: bool = True) -> None:
        self._stream: Any = None
        if tensor.is_cuda:
            if not record:
                self._stream = _raw_stream(tensor)
                record = self._stream is None
            self._fill(
                tuple(tensor.shape), tensor.dtype, lambda host: host.copy_(tensor, non_blocking=True), record
            )
        else:
            # The engine may reuse its buffers in place; a CPU clone of a few kB is the safe choice.
            self._host = tensor.detach().clone()
            self._wait: Any = None
            self._entry: Any = None
            self._key: Any = None

    @classmethod
    def written(cls, shape: tuple[int, ...], dtype: Any, write: Callable[[Any], Any]) -> HostCopy:
        """A pinned buffer that ``write(host)`` fills from the device: it queues the copy or kernel
        (``host`` is the pinned tensor, addressable from the device); the event follows it."""
        self = cls.__new__(cls)
        self._stream = None
        self._fill(shape, dtype, write, True)
        return self

    def _fill(self, shape: tuple[int, ...], dtype: Any, write: Callable[[Any], Any], record: bool) -> None:
        numel = self._numel = math.prod(shape)
        key, entry = PINNED.take(dtype, numel)
        host = entry.view(numel)
        if len(shape) != 1:
            host = host.view(shape)
        try:
            write(host)
        except BaseException:
            PINNED.give(key, entry)
            raise
        if record:
            entry.event.record()
            self._wait = entry.event
        else:
            self._wait = None
        self._entry, self._key, self._host = entry, key, host

    @property
    def unsealed(self) -> bool:
        """A device copy with no event to wait on yet (``record=False``, neither bound nor sealed)."""
        return self._entry is not None and self._wait is None

    def bind(self, event: Any) -> None:
        """The copy is done once ``event`` is: an event recorded after the copy in stream order."""
        if self.unsealed:
            self._wait = event

    def seal(self) -> None:
        """Record this copy's event now, on the stream the copy was queued on (later than needed,
        never too early)."""
        if self.unsealed and self._stream is not None:
            import torch

            ptr, device = self._stream
            self._entry.event.record(torch.cuda.ExternalStream(ptr, device=device))
            self._wait = self._entry.event

    def order_after(self) -> None:
        """Make the current stream wait (on the device) until this copy has been made, and so for
        everything queued before it on its stream. No-op on CPU or once resolved."""
        self.seal()
        if self._wait is not None:
            import torch

            torch.cuda.current_stream().wait_event(self._wait)

    def ready(self) -> bool:
        """The copy has landed (a non-blocking query of its event; no host-device sync)."""
        if self._entry is None:
            return True
        return self._wait is not None and event_done(self._wait, once=self._wait is not self._entry.event)

    def span(self) -> Span:
        """The host bytes as they lie in the pinned buffer, flat (no copy, no numpy object): only
        once ``ready()``, and only until ``release()``."""
        if self._entry is not None:
            return self._entry.span(self._numel)
        host = self._host
        return array_span(host.numpy()) if isinstance(host, _Frozen) else tensor_span(host)

    def release(self) -> None:
        """Give the pinned buffer back to the pool (after ``span``'s bytes have been copied out)."""
        if self._entry is not None and self._wait is not None:
            PINNED.give(self._key, self._entry)
            self._wait = self._entry = None
            self._host = _Frozen(None)

    def resolve(self) -> Any:
        if self._entry is None:
            return self._host.numpy()
        if self._wait is None:
            raise RuntimeError("a device copy resolved before any event followed it")
        wait_event(self._wait, once=self._wait is not self._entry.event)  # bound to the engine's
        out = self._host.numpy().copy()  # the pinned buffer goes back to the pool
        PINNED.give(self._key, self._entry)
        self._wait = self._entry = None
        self._host = _Frozen(out)
        return out


class EngineCopy(Deferred):
    """A host tensor the engine copies into itself, non-blocking, for its own result processing;
    readable once the engine's event ``ready`` has completed. Reading it instead of starting a copy
    of our own costs the serving thread nothing. The tensor is held, unchanged, until this is
    dropped: the engine allocates such a copy per step and never writes it again."""

    __slots__ = ("_host", "_ready")

    def __init__(self, host: Any, ready: Any) -> None:
        self._host, self._ready = host, ready

    def ready(self) -> bool:
        if self._ready is not None and event_done(self._ready, once=True):
            self._ready = None
        return self._ready is None

    def span(self) -> Span:
        return tensor_span(self._host)

    def release(self) -> None:
        """Nothing to give back: the engine's tensor is dropped with this."""

    def resolve(self) -> Any:
        if self._ready is not None:
            wait_event(self._ready, once=True)
            self._ready = None
        return self._host.numpy()


_last_done: list[Any] = [None]  # the last engine event seen complete (on the sender thread)


def wait_event(event: Any, once: bool = False) -> None:
    """Wait for a CUDA event by polling it between short sleeps. ``synchronize()`` would do, if it is
    sure to release the GIL for the whole wait; sleeping surely does, so the serving thread never
    waits on the device through us, and no CPU core spins. ``once``: an engine's event that is never
    recorded again (SGLang's ``copy_done``, one per step, shared by a step's copies): queried once
    for all of them. Never for our pooled events, which are recorded again for the next copy."""
    delay = 5e-5
    while not event_done(event, once):
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


def event_done(event: Any, once: bool = False) -> bool:
    """Whether a CUDA event has completed, without waiting (``once``: as for ``wait_event``)."""
    if once and event is _last_done[0]:
        return True
    if not event.query():
        return False
    if once:
        _last_done[0] = event
    return True


class _Frozen:
    """What a resolved CUDA HostCopy keeps: the copied-out array (resolve() may be called again)."""

    __slots__ = ("_a",)

    def __init__(self, a: Any) -> None:
        self._a = a

    def numpy(self) -> Any:
        return self._a
