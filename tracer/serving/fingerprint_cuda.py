"""Fused CUDA fingerprint: one Triton pass over the aux tensor plus a tiny finalize kernel.

``raw_stats(x3, sketch)`` returns exactly the raw layout of ``fingerprint._raw_stats`` —
``[slots, 6 + SKETCH_DIM]`` fp32: sum and sum of squares over finite rows, max and min over finite
rows, NaN rows, Inf rows, then the sketch of the row sum — so ``stats_to_fingerprint`` and
``FingerprintAccumulator`` work unchanged. Every row it is given is read; ``fingerprint()`` hands it
an evenly strided view of at most ``MAX_DEVICE_ROWS`` rows (``SAMPLED_CONFIG``).

Kernel 1 (grid: row blocks x (slot, column block)) reads each element once: per-column partial sums
of its row block, and per (row, slot, column block) partial sum of squares, finite max/min and
NaN/Inf flags. Kernel 2 (grid: slot x column chunk) adds the column partials over row blocks (a
row block holding a non-finite row is re-summed from the input without that row: rare, and
then only that block is read again), projects the column sums on the sketch directions, and
reduces the per-row partials. Output is written with atomics into a buffer kernel 1 initialises.

triton (and torch) are imported lazily, on the first CUDA call: the tracer imports without them.
``raw_stats`` returns None when triton is missing or the kernel failed once (the caller falls
back to the torch path); nothing here synchronises the device.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("eagle3_top.tracer")

NSTATS = 6  # = fingerprint._NSTATS
ENV_DISABLE = "EAGLE3_TOP_FUSED_FINGERPRINT"  # "0": always use the torch path

# Launch parameters (benchmarks/gpu/bench_fingerprint_gpu.py times alternatives).
CONFIG: dict[str, int] = {
    "rows_per_prog": 64,  # rows of one program of kernel 1 (one column-partial row per block)
    "sub_rows": 8,  # rows loaded at a time
    "block_c": 1024,  # columns of one program of kernel 1 (within one slot)
    "warps": 4,
    "fin_block_c": 256,  # columns of one program of kernel 2
    "fin_rows": 128,
    "fin_warps": 4,
}

# For the sampled view (<= fingerprint.MAX_DEVICE_ROWS rows): small row blocks keep every SM busy.
SAMPLED_CONFIG: dict[str, int] = dict(CONFIG, rows_per_prog=8, sub_rows=8)

triton: Any = None
tl: Any = None
_kernels: tuple[Any, Any, Any] | None = None
_failed: str | None = None
_copy_failed: str | None = None


row_tile: Any = None  # the shared per-tile work of both kernel sets (a @triton.jit function)


def _build() -> tuple[Any, Any, Any]:
    global triton, tl, row_tile
    import triton as _triton
    import triton.language as _tl

    triton, tl = _triton, _tl

    @triton.jit
    def _row_tile(x_ptr, stride_r, r, rmask, base_c, cmask, rp, kst):
        """Load rows ``r`` of one column block; store their partials (finite sum of squares, finite
        max and min, NaN and Inf flags) at ``rp`` (stride ``kst`` between statistics)."""
        m = rmask[:, None] & cmask[None, :]
        v = tl.load(x_ptr + r.to(tl.int64)[:, None] * stride_r + base_c[None, :], mask=m, other=0.0)
        v = v.to(tl.float32)
        fin = (v == v) & (tl.abs(v) != float("inf"))
        vf = tl.where(fin, v, 0.0)
        nanr = tl.max((v != v).to(tl.float32), axis=1)
        infr = tl.max((tl.abs(v) == float("inf")).to(tl.float32), axis=1)
        tl.store(rp, tl.sum(vf * vf, axis=1), mask=rmask)
        tl.store(rp + kst, tl.max(tl.where(fin & m, v, float("-inf")), axis=1), mask=rmask)
        tl.store(rp + 2 * kst, tl.min(tl.where(fin & m, v, float("inf")), axis=1), mask=rmask)
        tl.store(rp + 3 * kst, nanr, mask=rmask)
        tl.store(rp + 4 * kst, infr, mask=rmask)
        return v, vf, nanr, infr

    row_tile = _row_tile

    @triton.jit
    def _fp_main(
        x_ptr, stride_r, rows, width, n_cb, n_cbt, total, n_out,
        part_ptr, rp_ptr, dirty_ptr, out_ptr,
        NOUT: tl.constexpr, OUTP2: tl.constexpr,
        RPP: tl.constexpr, SUB: tl.constexpr, BC: tl.constexpr,
    ):  # fmt: skip
        rb = tl.program_id(0)
        j = tl.program_id(1)  # slot * n_cb + column block
        s = j // n_cb
        cb = j - s * n_cb
        cols = cb * BC + tl.arange(0, BC)
        cmask = cols < width
        base_c = s * width + cols
        colsum = tl.zeros([BC], dtype=tl.float32)
        bad = tl.zeros([SUB], dtype=tl.float32)
        kst = n_cbt * rows
        for i in range(0, RPP, SUB):
            r = rb * RPP + i + tl.arange(0, SUB)
            rmask = r < rows
            v, vf, nanr, infr = row_tile(x_ptr, stride_r, r, rmask, base_c, cmask, rp_ptr + j * rows + r, kst)
            colsum += tl.sum(v, axis=0)
            bad = tl.maximum(bad, nanr + infr)
        tl.store(part_ptr + rb.to(tl.int64) * total + base_c, colsum, mask=cmask)
        tl.store(dirty_ptr + rb * n_cbt + j, tl.max(bad, axis=0))
        if (rb == 0) & (j == 0):
            o = tl.arange(0, OUTP2)
            col = o % NOUT
            init = tl.where(col == 2, float("-inf"), tl.where(col == 3, float("inf"), 0.0))
            tl.store(out_ptr + o, init, mask=o < n_out)

    @triton.jit
    def _fp_final(
        x_ptr, stride_r, rows, width, n_cb, n_cbt, n_rb, total, n_chunks,
        part_ptr, rp_ptr, dirty_ptr, sk_ptr, out_ptr,
        NOUT: tl.constexpr, SK: tl.constexpr, RPP: tl.constexpr, FBC: tl.constexpr,
        FR: tl.constexpr, RBT: tl.constexpr, NCB_P2: tl.constexpr,
    ):  # fmt: skip
        s = tl.program_id(0)
        ch = tl.program_id(1)
        cols = ch * FBC + tl.arange(0, FBC)
        cmask = cols < width
        base_c = s * width + cols
        cbs = tl.arange(0, NCB_P2)
        cbm = cbs < n_cb
        kst = n_cbt * rows
        acc = tl.zeros([FBC], dtype=tl.float32)
        for rb0 in range(0, n_rb, RBT):
            rbs = rb0 + tl.arange(0, RBT)
            rbm = rbs < n_rb
            dm = rbm[:, None] & cbm[None, :]
            d = tl.max(
                tl.load(dirty_ptr + rbs[:, None] * n_cbt + s * n_cb + cbs[None, :], mask=dm, other=0.0),
                axis=1,
            )
            pm = (rbm & (d == 0))[:, None] & cmask[None, :]
            part = tl.load(part_ptr + rbs.to(tl.int64)[:, None] * total + base_c[None, :], mask=pm, other=0.0)
            acc += tl.sum(part, axis=0)
            if tl.max(d, axis=0) > 0:  # rare: re-sum the finite rows of the dirty row blocks
                for k in range(0, RBT):
                    rb = rb0 + k
                    if rb < n_rb:
                        dk = tl.max(
                            tl.load(dirty_ptr + rb * n_cbt + s * n_cb + cbs, mask=cbm, other=0.0), axis=0
                        )
                        if dk > 0:
                            for i in range(0, RPP):
                                r = rb * RPP + i
                                if r < rows:
                                    off = (s * n_cb + cbs) * rows + r
                                    fl = tl.load(rp_ptr + 3 * kst + off, mask=cbm, other=0.0)
                                    fl += tl.load(rp_ptr + 4 * kst + off, mask=cbm, other=0.0)
                                    if tl.max(fl, axis=0) == 0:
                                        xr = tl.load(
                                            x_ptr + r.to(tl.int64) * stride_r + base_c, mask=cmask, other=0.0
                                        )
                                        acc += xr.to(tl.float32)
        o = out_ptr + s * NOUT
        tl.atomic_add(o, tl.sum(acc, axis=0))
        ks = tl.arange(0, SK)
        mat = tl.load(sk_ptr + ks[:, None] * width + cols[None, :], mask=cmask[None, :], other=0.0)
        tl.atomic_add(o + 6 + ks, tl.sum(mat * acc[None, :], axis=1))
        # per-row partials -> finite-row sum of squares, max, min, NaN rows, Inf rows
        rr = tl.arange(0, FR)
        sq_t = tl.zeros([FR], dtype=tl.float32)
        mx_t = tl.full([FR], float("-inf"), tl.float32)
        mn_t = tl.full([FR], float("inf"), tl.float32)
        nan_t = tl.zeros([FR], dtype=tl.float32)
        inf_t = tl.zeros([FR], dtype=tl.float32)
        cb2 = cbs[:, None]
        cbm2 = cbm[:, None]
        for r0 in range(ch * FR, rows, n_chunks * FR):
            r = r0 + rr
            rm = r < rows
            # all column blocks of these rows in one 2D load per statistic: a loop over the
            # column blocks would chain n_cb dependent global loads (the sampled case's latency)
            off = (s * n_cb + cb2) * rows + r[None, :]
            m2 = cbm2 & rm[None, :]
            sq = tl.sum(tl.load(rp_ptr + off, mask=m2, other=0.0), axis=0)
            mx = tl.max(tl.load(rp_ptr + kst + off, mask=m2, other=float("-inf")), axis=0)
            mn = tl.min(tl.load(rp_ptr + 2 * kst + off, mask=m2, other=float("inf")), axis=0)
            na = tl.max(tl.load(rp_ptr + 3 * kst + off, mask=m2, other=0.0), axis=0)
            nf = tl.max(tl.load(rp_ptr + 4 * kst + off, mask=m2, other=0.0), axis=0)
            fin = (na == 0) & (nf == 0) & rm
            sq_t += tl.where(fin, sq, 0.0)
            mx_t = tl.maximum(mx_t, tl.where(fin, mx, float("-inf")))
            mn_t = tl.minimum(mn_t, tl.where(fin, mn, float("inf")))
            nan_t += na
            inf_t += tl.where(na > 0, 0.0, nf)
        tl.atomic_add(o + 1, tl.sum(sq_t, axis=0))
        tl.atomic_max(o + 2, tl.max(mx_t, axis=0))
        tl.atomic_min(o + 3, tl.min(mn_t, axis=0))
        tl.atomic_add(o + 4, tl.sum(nan_t, axis=0))
        tl.atomic_add(o + 5, tl.sum(inf_t, axis=0))

    @triton.jit
    def _fp_copy(src_ptr, dst_ptr, n, NP2: tl.constexpr):
        # device result -> mapped pinned host memory: a 1-program kernel costs less GPU time than
        # the DMA engine's D2H copy of a few hundred bytes (H200: ~7.7 us per copy)
        o = tl.arange(0, NP2)
        tl.store(dst_ptr + o, tl.load(src_ptr + o, mask=o < n), mask=o < n)

    return _fp_main, _fp_final, _fp_copy


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def available() -> bool:
    """True when the fused path can run (triton imports and has not failed here)."""
    global _kernels, _failed
    if _failed is not None or os.environ.get(ENV_DISABLE) == "0":
        return False
    if _kernels is None:
        try:
            _kernels = _build()
        except Exception as exc:  # no triton, or one too old for these kernels
            _failed = f"{type(exc).__name__}: {exc}"
            return False
    return True


def raw_stats(x3: Any, sketch: Any, config: dict[str, int] | None = None) -> Any:
    """``[slots, 6 + SK]`` fp32 raw stats of a CUDA ``[rows, slots, width]`` tensor, or None."""
    global _failed
    if x3.device.type != "cuda" or x3.shape[0] == 0 or not available():
        return None
    try:
        return _launch(x3, sketch, config or CONFIG)
    except Exception as exc:  # compile or launch failure: say so once, fall back for good
        _failed = f"{type(exc).__name__}: {exc}"
        log.warning("eagle3-top: fused fingerprint unavailable (%s); using the torch path", _failed[:300])
        return None


class HostPointer:
    """A pinned host buffer handed to a Triton kernel as a pointer: with unified addressing, pinned
    host memory is directly addressable from the device at the same address (no mapping call)."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.dtype = host.dtype

    def data_ptr(self) -> int:
        return int(self.host.data_ptr())


def copy_to_host(src: Any, host: Any) -> bool:
    """Queue a kernel that writes the small device tensor ``src`` into pinned ``host`` (same numel,
    float32). False when that cannot be done here (the caller copies with the DMA engine)."""
    global _copy_failed
    if _copy_failed is not None or _kernels is None:
        return False
    try:
        n = int(src.numel())
        _kernels[2][(1,)](src, HostPointer(host), n, NP2=_next_pow2(max(n, 2)), num_warps=1)
        return True
    except Exception as exc:
        _copy_failed = f"{type(exc).__name__}: {exc}"
        log.info("eagle3-top: mapped result copy unavailable (%s); using a D2H copy", _copy_failed[:200])
        return False


def _launch(x3: Any, sketch: Any, cfg: dict[str, int], main_only: bool = False) -> Any:
    """Both kernels (``main_only``: the first alone, for the benchmark's breakdown)."""
    import torch

    assert _kernels is not None
    main, final, _ = _kernels
    rows, slots, width = (int(v) for v in x3.shape)
    total = slots * width
    x2 = x3.reshape(rows, total)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    sk_dim = int(sketch.shape[0])
    nout = NSTATS + sk_dim
    rpp, sub, bc = cfg["rows_per_prog"], cfg["sub_rows"], cfg["block_c"]
    n_rb = -(-rows // rpp)
    n_cb = -(-width // bc)
    n_cbt = slots * n_cb
    dev = x2.device
    f32 = torch.float32
    part = torch.empty((n_rb, total), dtype=f32, device=dev)
    rp = torch.empty((5, n_cbt, rows), dtype=f32, device=dev)
    dirty = torch.empty((n_rb, n_cbt), dtype=f32, device=dev)
    out = torch.empty((slots, nout), dtype=f32, device=dev)
    main[(n_rb, n_cbt)](
        x2, x2.stride(0), rows, width, n_cb, n_cbt, total, slots * nout,
        part, rp, dirty, out,
        NOUT=nout, OUTP2=_next_pow2(slots * nout), RPP=rpp, SUB=sub, BC=bc,
        num_warps=cfg["warps"],
    )  # fmt: skip
    if main_only:
        return out
    fbc = cfg["fin_block_c"]
    n_chunks = -(-width // fbc)
    final[(slots, n_chunks)](
        x2, x2.stride(0), rows, width, n_cb, n_cbt, n_rb, total, n_chunks,
        part, rp, dirty, sketch, out,
        NOUT=nout, SK=sk_dim, RPP=rpp, FBC=fbc, FR=cfg["fin_rows"], RBT=16,
        NCB_P2=max(_next_pow2(n_cb), 2), num_warps=cfg["fin_warps"],
    )  # fmt: skip
    return out
