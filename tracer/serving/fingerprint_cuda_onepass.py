"""One-kernel fingerprint of the sampled view (a candidate, timed by the GPU benchmark).

``fingerprint_cuda`` needs two reductions and a copy for the ``<= MAX_DEVICE_ROWS`` rows that
``fingerprint()`` samples: on an H200 ~21 µs, 2.06x the time to read the whole Kimi-sized batch
once. Here each program owns one column block of one slot for *all* sampled rows, so its column
sums are complete and it projects them on the sketch itself; the per-row partials (sum of squares,
finite max/min, NaN/Inf flags) go to a small buffer, and the last program to finish (an atomic
counter) reduces them and writes the ``[slots, 6 + SK]`` result, possibly straight into pinned host
memory. Same raw layout as ``fingerprint._raw_stats``.

Rows that are not finite: a program adds only the rows that are finite *within its block*; a row
that is finite there but not elsewhere in its slot is subtracted again by the last program (rare:
it re-reads that row). Not the default path until the benchmark has timed it on a GPU.
"""

from __future__ import annotations

from typing import Any

from eagle3_top.tracer.serving import fingerprint_cuda as fc

ENV_ENABLE = "EAGLE3_TOP_FINGERPRINT_ONEPASS"  # "1": fingerprint() uses this kernel for the sampled view
_kernel: Any = None
_counters: dict[Any, Any] = {}
_failed: str | None = None


def enabled() -> bool:
    import os

    return _failed is None and os.environ.get(ENV_ENABLE) == "1"


def to_host(x3: Any, sketch: Any) -> Any:
    """A ``HostCopy`` of the raw stats, written by the kernel straight into pinned host memory;
    None when the kernel failed (said once; the caller takes the two-kernel path)."""
    global _failed
    from eagle3_top.tracer.serving.deferred import HostCopy

    try:
        slots = int(x3.shape[1])
        shape = (slots, fc.NSTATS + int(sketch.shape[0]))
        return HostCopy.written(
            shape, sketch.dtype, lambda host: raw_stats(x3, sketch, out=fc.HostPointer(host))
        )
    except Exception as exc:
        _failed = f"{type(exc).__name__}: {exc}"
        fc.log.warning("eagle3-top: one-pass fingerprint unavailable (%s)", _failed[:300])
        return None


row_tile: Any = None  # fingerprint_cuda's, looked up here when the kernel compiles


def _build() -> Any:
    global row_tile
    import triton
    import triton.language as tl

    if not fc.available() or fc.row_tile is None:
        raise RuntimeError(f"the fused fingerprint kernels are unavailable ({fc._failed})")
    row_tile = fc.row_tile

    @triton.jit
    def _fp_onepass(
        x_ptr, stride_r, rows, width, n_cb, n_cbt, slots,
        part_ptr, rp_ptr, cnt_ptr, sk_ptr, out_ptr,
        NOUT: tl.constexpr, SK: tl.constexpr, BC: tl.constexpr, SUB: tl.constexpr,
        RP2: tl.constexpr, CBT: tl.constexpr, SKP: tl.constexpr,
    ):  # fmt: skip
        j = tl.program_id(0)  # slot * n_cb + column block
        s = j // n_cb
        cb = j - s * n_cb
        cols = cb * BC + tl.arange(0, BC)
        cmask = cols < width
        base_c = s * width + cols
        kst = n_cbt * rows
        colsum = tl.zeros([BC], dtype=tl.float32)
        for r0 in range(0, rows, SUB):
            r = r0 + tl.arange(0, SUB)
            rmask = r < rows
            v, vf, nanr, infr = row_tile(x_ptr, stride_r, r, rmask, base_c, cmask, rp_ptr + j * rows + r, kst)
            ok = (nanr + infr) == 0  # finite within this block; elsewhere is settled at the end
            colsum += tl.sum(tl.where(ok[:, None], vf, 0.0), axis=0)
        ks = tl.arange(0, SK)
        mat = tl.load(sk_ptr + ks[:, None] * width + cols[None, :], mask=cmask[None, :], other=0.0)
        tl.store(part_ptr + j * (SK + 1), tl.sum(colsum, axis=0))
        tl.store(part_ptr + j * (SK + 1) + 1 + ks, tl.sum(mat * colsum[None, :], axis=1))
        tl.debug_barrier()  # every thread's stores before this program's arrival is counted
        if tl.atomic_add(cnt_ptr, 1) == n_cbt - 1:  # the last program reduces everything
            rr = tl.arange(0, RP2)
            rm = rr < rows
            cbs = tl.arange(0, CBT)
            kk = tl.arange(0, SKP)  # 0: the sum, 1 + k: sketch k (SK + 1 padded to a power of two)
            km = kk <= SK
            for sl in range(0, slots):
                sq = tl.zeros([RP2], dtype=tl.float32)
                mx = tl.full([RP2], float("-inf"), tl.float32)
                mn = tl.full([RP2], float("inf"), tl.float32)
                na = tl.zeros([RP2], dtype=tl.float32)
                nf = tl.zeros([RP2], dtype=tl.float32)
                tot = tl.zeros([SKP], dtype=tl.float32)
                for c0 in range(0, n_cb, CBT):
                    c = c0 + cbs
                    cm = c < n_cb
                    off = (sl * n_cb + c)[:, None] * rows + rr[None, :]
                    m2 = cm[:, None] & rm[None, :]
                    sq += tl.sum(tl.load(rp_ptr + off, mask=m2, other=0.0, cache_modifier=".cg"), axis=0)
                    mx = tl.maximum(
                        mx,
                        tl.max(
                            tl.load(rp_ptr + kst + off, mask=m2, other=float("-inf"), cache_modifier=".cg"),
                            axis=0,
                        ),
                    )
                    mn = tl.minimum(
                        mn,
                        tl.min(
                            tl.load(
                                rp_ptr + 2 * kst + off, mask=m2, other=float("inf"), cache_modifier=".cg"
                            ),
                            axis=0,
                        ),
                    )
                    na = tl.maximum(
                        na,
                        tl.max(
                            tl.load(rp_ptr + 3 * kst + off, mask=m2, other=0.0, cache_modifier=".cg"), axis=0
                        ),
                    )
                    nf = tl.maximum(
                        nf,
                        tl.max(
                            tl.load(rp_ptr + 4 * kst + off, mask=m2, other=0.0, cache_modifier=".cg"), axis=0
                        ),
                    )
                    po = (sl * n_cb + c)[:, None] * (SK + 1) + kk[None, :]
                    pm = cm[:, None] & km[None, :]
                    tot += tl.sum(tl.load(part_ptr + po, mask=pm, other=0.0, cache_modifier=".cg"), axis=0)
                fin = (na == 0) & (nf == 0) & rm
                dirty = ((na + nf) > 0) & rm
                if tl.max(dirty.to(tl.int32), axis=0) > 0:  # rare: take out rows counted where finite locally
                    for r in range(0, rows):
                        if tl.sum(tl.where((rr == r) & dirty, 1, 0), axis=0) > 0:
                            for c in range(0, n_cb):
                                g = (sl * n_cb + c) * rows + r
                                bad = tl.load(rp_ptr + 3 * kst + g, cache_modifier=".cg")
                                bad += tl.load(rp_ptr + 4 * kst + g, cache_modifier=".cg")
                                if bad == 0:
                                    cc = c * BC + tl.arange(0, BC)
                                    ccm = cc < width
                                    xr = tl.load(x_ptr + r * stride_r + sl * width + cc, mask=ccm, other=0.0)
                                    xr = xr.to(tl.float32)
                                    mk = tl.load(
                                        sk_ptr + ks[:, None] * width + cc[None, :],
                                        mask=ccm[None, :],
                                        other=0.0,
                                    )
                                    proj = tl.sum(mk * xr[None, :], axis=1)
                                    sub = tl.where(kk == 0, tl.sum(xr, axis=0), 0.0)
                                    tot -= sub
                                    for k in range(0, SK):  # tot[1 + k] -= proj[k]
                                        pk = tl.sum(tl.where(ks == k, proj, 0.0), axis=0)
                                        tot -= tl.where(kk == 1 + k, pk, 0.0)
                o = out_ptr + sl * NOUT
                tl.store(o + tl.where(kk == 0, 0, 5 + kk), tot, mask=km)
                tl.store(o + 1, tl.sum(tl.where(fin, sq, 0.0), axis=0))
                tl.store(o + 2, tl.max(tl.where(fin, mx, float("-inf")), axis=0))
                tl.store(o + 3, tl.min(tl.where(fin, mn, float("inf")), axis=0))
                tl.store(o + 4, tl.sum(tl.where(rm, na, 0.0), axis=0))
                tl.store(o + 5, tl.sum(tl.where(rm & (na == 0), nf, 0.0), axis=0))
            tl.atomic_xchg(cnt_ptr, 0)  # ready for the next call (calls are stream-ordered)

    return _fp_onepass


def raw_stats(x3: Any, sketch: Any, out: Any = None, block_c: int = 256, sub: int = 8, warps: int = 4) -> Any:
    """``[slots, 6 + SK]`` fp32 raw stats of a CUDA ``[rows, slots, width]`` tensor in one kernel.

    ``out``: where to write them (a device tensor, or pinned host memory: ``fc.HostPointer``);
    a new device tensor when None. Raises when triton is missing or the kernel fails.
    """
    import torch

    global _kernel
    if _kernel is None:
        _kernel = _build()
    rows, slots, width = (int(v) for v in x3.shape)
    x2 = x3.reshape(rows, slots * width)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    sk_dim = int(sketch.shape[0])
    nout = fc.NSTATS + sk_dim
    n_cb = -(-width // block_c)
    n_cbt = slots * n_cb
    dev = x2.device
    f32 = torch.float32
    part = torch.empty((n_cbt, sk_dim + 1), dtype=f32, device=dev)
    rp = torch.empty((5, n_cbt, rows), dtype=f32, device=dev)
    cnt = _counters.get(dev)
    if cnt is None:
        cnt = _counters[dev] = torch.zeros(1, dtype=torch.int32, device=dev)
    if out is None:
        out = torch.empty((slots, nout), dtype=f32, device=dev)
    _kernel[(n_cbt,)](
        x2, x2.stride(0), rows, width, n_cb, n_cbt, slots,
        part, rp, cnt, sketch, out,
        NOUT=nout, SK=sk_dim, BC=block_c, SUB=sub, RP2=fc._next_pow2(max(rows, 2)), CBT=16,
        SKP=fc._next_pow2(sk_dim + 1),
        num_warps=warps,
    )  # fmt: skip
    return out
