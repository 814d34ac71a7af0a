"""Fingerprints of the aux hidden states a draft consumes, one per slot.

``fingerprint(x, slots)`` reduces a ``[rows, slots * width]`` tensor on its own device and starts a
non-blocking copy of the small result; nothing on the caller's path waits for the device. The same
function fingerprints training hidden states (manifest) and live ones (tracer), so the two are
comparable number for number.

Per slot: row count, mean, std, rms, abs-max over all values of the slot; NaN and Inf counts are
counted per *row* (a row with any NaN counts once), which needs no extra pass over the tensor; and a
sketch: the mean row projected on ``SKETCH_DIM`` fixed random directions, seeded by the width only,
so sketches from different runs and machines are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from eagle3_top.tracer.schema import Fingerprint
from eagle3_top.tracer.serving.deferred import Deferred, HostCopy

SKETCH_DIM = 16
MAX_DEVICE_ROWS = 128  # rows fingerprinted per call on a GPU; more are sampled with a stride
SKETCH_SEED = 0xE3E3
# Column layout of the raw per-slot stats row (sums, so that raw rows from many tensors add up),
# followed by the SKETCH_DIM columns of the projected row sum.
_SUM, _SUMSQ, _MAX, _MIN, _NAN, _INF = range(6)
_NSTATS = 6


@lru_cache(maxsize=16)
def sketch_matrix(width: int) -> np.ndarray:
    """[SKETCH_DIM, width] float32 Gaussian directions, scaled so a unit vector projects to ~unit."""
    rng = np.random.default_rng([SKETCH_SEED, width])
    return (rng.standard_normal((SKETCH_DIM, width)) / math.sqrt(width)).astype(np.float32)


_device_sketch: dict[tuple[str, int], Any] = {}


def _sketch_on(device: Any, width: int) -> Any:
    import torch

    key = (str(device), width)
    mat = _device_sketch.get(key)
    if mat is None:
        mat = torch.from_numpy(sketch_matrix(width)).to(device)
        _device_sketch[key] = mat
    return mat


class PendingFingerprint(Deferred):
    """Device-side reduction on its way to the host; resolves to a ``Fingerprint``."""

    __slots__ = ("_copy", "rows", "rows_total", "slots", "width")

    def __init__(self, copy: Deferred, rows: int, slots: int, width: int) -> None:
        self._copy = copy
        self.rows = rows
        self.rows_total = rows
        self.slots = slots
        self.width = width

    def raw(self) -> np.ndarray:
        return np.asarray(self._copy.resolve())

    def resolve(self) -> Fingerprint:
        # rows_total != rows: the stats cover `rows` evenly strided rows
        return stats_to_fingerprint(self.raw(), self.rows, self.slots, self.width, self.rows_total)


def stats_to_fingerprint(
    stats: np.ndarray, rows: int, slots: int, width: int, rows_total: int | None = None
) -> Fingerprint:
    """Turn raw per-slot sums ``[slots, 6 + SKETCH_DIM]`` into a ``Fingerprint``."""
    stats = stats.astype(np.float64)
    finite_rows = np.maximum(rows - stats[:, _NAN] - stats[:, _INF], 0)
    denom = np.maximum(finite_rows, 1)
    mean = stats[:, _SUM] / denom / width
    ms = stats[:, _SUMSQ] / denom / width
    rms = np.sqrt(np.maximum(ms, 0.0))
    std = np.sqrt(np.maximum(ms - mean**2, 0.0))
    absmax = np.where(finite_rows > 0, np.maximum(np.abs(stats[:, _MAX]), np.abs(stats[:, _MIN])), 0.0)
    sketch = stats[:, _NSTATS:] / denom[:, None]
    return Fingerprint(
        rows=rows,
        slots=slots,
        slot_width=width,
        mean=tuple(mean.tolist()),
        std=tuple(std.tolist()),
        rms=tuple(rms.tolist()),
        absmax=tuple(absmax.tolist()),
        nan=tuple(stats[:, _NAN].astype(np.int64).tolist()),
        inf=tuple(stats[:, _INF].astype(np.int64).tolist()),
        sketch=tuple(tuple(r) for r in sketch.tolist()),
        rows_total=rows_total if rows_total != rows else None,
    )


class FingerprintAccumulator:
    """Adds raw fingerprints of many tensors (training files) into one, exactly."""

    def __init__(self) -> None:
        self.raw: np.ndarray | None = None
        self.rows = 0
        self.slots = 0
        self.width = 0

    def add(self, pending: PendingFingerprint) -> None:
        raw = pending.raw()
        if self.raw is None:
            self.raw, self.slots, self.width = raw.astype(np.float64), pending.slots, pending.width
        else:
            if (pending.slots, pending.width) != (self.slots, self.width):
                raise ValueError(
                    f"aux layout changed: {pending.slots} x {pending.width} after {self.slots} x {self.width}"
                )
            r = self.raw
            r[:, _MAX] = np.maximum(r[:, _MAX], raw[:, _MAX])
            r[:, _MIN] = np.minimum(r[:, _MIN], raw[:, _MIN])
            for col in (_SUM, _SUMSQ, _NAN, _INF):
                r[:, col] += raw[:, col]
            r[:, _NSTATS:] += raw[:, _NSTATS:]
        self.rows += pending.rows

    def fingerprint(self) -> Fingerprint:
        if self.raw is None:
            raise ValueError("no tensors were fingerprinted")
        return stats_to_fingerprint(self.raw, self.rows, self.slots, self.width)


def _slot_width(total: int, slots: int) -> int:
    if slots <= 0 or total % slots:
        raise ValueError(f"aux width {total} is not divisible into {slots} slots")
    return total // slots


def _device_sample(x: Any) -> Any:
    """On the device a large verify batch is fingerprinted on an evenly strided subset of its rows
    (a view: no copy, no sync), so the cost stays near one read of MAX_DEVICE_ROWS rows."""
    step = -(-int(x.shape[0]) // MAX_DEVICE_ROWS)
    return x[::step] if step > 1 else x


def fingerprint(x: Any, slots: int, *, clone: bool = True) -> PendingFingerprint:
    """Fingerprint a ``[..., slots * width]`` tensor (torch, any device, any float dtype).

    On CUDA the reduction is launched here, on the caller's stream (one fused Triton pass when triton
    imports, ``fingerprint_cuda``; the torch path otherwise), and only its small
    ``[slots, 6 + SKETCH_DIM]`` result is copied, non-blocking: nothing waits for the device. On
    CPU the reduction *is* the cost, so the caller only clones the rows and the sender thread
    reduces them (torch releases the GIL in its kernels, so that runs beside the serving loop).
    ``clone=False`` is for callers that own ``x`` and will not change it (manifest building).
    """
    width = _slot_width(x.shape[-1], slots)
    x3 = x.reshape(-1, slots, width)
    rows = int(x3.shape[0])
    if x3.device.type == "cpu":
        return PendingFingerprint(_CpuStats(x3.detach().clone() if clone else x3), rows, slots, width)
    x3 = _device_sample(x3)
    pending = PendingFingerprint(_device_result(x3), int(x3.shape[0]), slots, width)
    pending.rows_total = rows
    return pending


_side_streams: dict[int, Any] = {}


class SnapshotFingerprint(Deferred):
    """A fingerprint taken in two halves: on the serving thread, a device copy of the rows to
    reduce (at most ``MAX_DEVICE_ROWS``, evenly strided) and an event; on the sender thread,
    ``resolve()`` runs ``fingerprint()`` on that copy, on a stream of its own that waits for the
    event on the device. Triton's launcher spends tens of microseconds of Python per kernel; this
    way the serving thread spends none of them. Resolves to a ``Fingerprint``."""

    __slots__ = ("_snap", "_event", "slots", "rows_total")

    def __init__(self, snap: Any, event: Any, slots: int, rows_total: int) -> None:
        self._snap, self._event, self.slots, self.rows_total = snap, event, slots, rows_total

    def resolve(self) -> Fingerprint:
        import torch

        snap = self._snap
        if snap is None:
            raise RuntimeError("a fingerprint snapshot resolved twice")
        index = snap.get_device()
        stream = _side_streams.get(index)
        if stream is None:
            stream = _side_streams[index] = torch.cuda.Stream(device=index)
        with torch.cuda.device(index), torch.cuda.stream(stream):
            stream.wait_event(self._event)  # on the device: no host wait
            pending = fingerprint(snap, self.slots, clone=False)
        pending.rows_total = self.rows_total
        try:
            return pending.resolve()  # waits for its result copy; the snapshot is read by then
        finally:
            self._snap = None


def fingerprint_snapshot(x: Any, slots: int) -> PendingFingerprint | SnapshotFingerprint:
    """``fingerprint(x, slots)`` for the serving path: on CUDA only a copy of the (sampled) rows
    and an event are queued here (``SnapshotFingerprint``); elsewhere the same as ``fingerprint``.
    The copy matters: under CUDA graphs the aux tensor is a graph output buffer the next step
    overwrites."""
    if not getattr(x, "is_cuda", False):
        return fingerprint(x, slots)
    import torch

    total = x.shape[-1]
    _slot_width(total, slots)
    x2 = x.reshape(-1, total)
    snap = _device_sample(x2).clone()
    event = torch.cuda.Event()
    event.record()
    return SnapshotFingerprint(snap, event, slots, int(x2.shape[0]))


def _device_result(x3: Any) -> Any:
    """The raw stats on their way to the host (a ``HostCopy``)."""
    from eagle3_top.tracer.serving import fingerprint_cuda as fc

    if x3.device.type == "cuda" and 0 < x3.shape[0] <= MAX_DEVICE_ROWS:
        from eagle3_top.tracer.serving import fingerprint_cuda_onepass

        if fc.available() and fingerprint_cuda_onepass.enabled():
            got = fingerprint_cuda_onepass.to_host(x3, _sketch_on(x3.device, int(x3.shape[2])))
            if got is not None:
                return got
    stats = _device_stats(x3)
    if stats.device.type != "cuda":
        return HostCopy(stats)
    # the copy kernel where triton runs (cheaper than a DMA copy of a few hundred bytes), else DMA
    return HostCopy.written(
        tuple(stats.shape),
        stats.dtype,
        lambda host: fc.copy_to_host(stats, host) or host.copy_(stats, non_blocking=True),
    )


def _device_stats(x3: Any) -> Any:
    """On CUDA with triton: the fused one-pass kernel (``fingerprint_cuda``); else the torch path."""
    if x3.device.type == "cuda" and x3.shape[0] > 0:
        from eagle3_top.tracer.serving import fingerprint_cuda

        # the sampled case gets its own launch shape (benchmarks/gpu/bench_fingerprint_gpu.py)
        cfg = fingerprint_cuda.SAMPLED_CONFIG if x3.shape[0] <= MAX_DEVICE_ROWS else None
        stats = fingerprint_cuda.raw_stats(x3, _sketch_on(x3.device, int(x3.shape[2])), cfg)
        if stats is not None:
            return stats
    return _raw_stats(x3)


class _CpuStats(Deferred):
    __slots__ = ("_x3",)

    def __init__(self, x3: Any) -> None:
        self._x3 = x3

    def resolve(self) -> Any:
        return _raw_stats(self._x3).numpy()


def _raw_stats(x3: Any) -> Any:
    """Per-slot raw sums ``[slots, 6 + SKETCH_DIM]`` of a ``[rows, slots, width]`` tensor."""
    import torch

    rows, slots, width = x3.shape
    f32 = torch.float32
    # Per (row, slot) L2 norm: one pass; non-finite rows show up as nan/inf norms.
    norms = torch.linalg.vector_norm(x3, dim=2, dtype=f32)  # [rows, slots]
    nan_rows = torch.isnan(norms)
    inf_rows = torch.isinf(norms)
    finite = ~(nan_rows | inf_rows)
    sumsq = torch.where(finite, norms * norms, 0.0).sum(0)
    # Mean row over finite rows only, so one bad row does not blank the whole fingerprint.
    if rows:
        keep = finite.unsqueeze(-1)
        zero = torch.zeros((), dtype=x3.dtype, device=x3.device)
        row_sum = torch.where(keep, x3, zero).sum(0, dtype=f32)  # [slots, width]
        mx = torch.where(keep, x3, float("-inf")).amax(dim=(0, 2)).to(f32)
        mn = torch.where(keep, x3, float("inf")).amin(dim=(0, 2)).to(f32)
    else:
        row_sum = torch.zeros(slots, width, dtype=f32, device=x3.device)
        mx = mn = torch.zeros(slots, dtype=f32, device=x3.device)
    sketch = row_sum @ _sketch_on(x3.device, width).T  # [slots, SKETCH_DIM]
    stats = torch.cat(
        [
            row_sum.sum(1, keepdim=True),
            sumsq.unsqueeze(1),
            mx.unsqueeze(1),
            mn.unsqueeze(1),
            nan_rows.sum(0, dtype=f32).unsqueeze(1),
            inf_rows.sum(0, dtype=f32).unsqueeze(1),
            sketch,
        ],
        dim=1,
    )
    return stats


def fingerprint_now(x: Any, slots: int) -> Fingerprint:
    """Synchronous convenience for offline use (manifest building, tests)."""
    return fingerprint(x, slots).resolve()


def sketch_cosine(a: Sequence[float], b: Sequence[float]) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    den = float(np.linalg.norm(va) * np.linalg.norm(vb))
    return float(va @ vb / den) if den > 0 else 0.0
