"""The GPU fingerprint kernels' arithmetic, on CPU, under Triton's interpreter.

``tracer/serving/fingerprint_cuda.py`` (two reductions and the result-copy kernel) and
``tracer/serving/fingerprint_cuda_onepass.py`` run on an H200 in production, and this project's GPU time is
scarce; ``TRITON_INTERPRET=1`` runs the same ``@triton.jit`` functions with numpy on CPU tensors, so
every CI run checks them against the torch path (``fingerprint._raw_stats``) on NaN rows, Inf rows
and strided views. The interpreter runs a grid's programs one after another, so this checks the
arithmetic and the indexing, not how programs order their memory traffic on a device (the one-pass
kernel's last-program hand-over); that, and their speed, is the GPU benchmark's business
(benchmarks/gpu/bench_fingerprint_gpu.py checks both kernels against the torch path there too).

Triton is not a dependency of the test venv (the sglang tests stand it in, and a real one would
change what torch decides at import time), so ``make test`` installs it on its own into
``.venv/triton-interp`` and names it in ``EAGLE3_TOP_TEST_TRITON``; the kernels run in a child
interpreter with that folder in front. Triton 3.9: 3.6's interpreter (the H200's) fails on
NumPy 2.4 (``int()`` of a 1-element array).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from patience import HANG_GUARD_S

pytest.importorskip("torch")

TRITON_DIR = os.environ.get("EAGLE3_TOP_TEST_TRITON", "")
if not os.path.isdir(os.path.join(TRITON_DIR, "triton")):
    pytest.skip(
        "no triton for the interpreter: EAGLE3_TOP_TEST_TRITON names none (make test installs it)",
        allow_module_level=True,
    )

CHILD = r"""
import json
import numpy as np
import torch
from eagle3_top.tracer.serving import fingerprint as fp
from eagle3_top.tracer.serving import fingerprint_cuda as fc
from eagle3_top.tracer.serving import fingerprint_cuda_onepass as op

assert fc.available(), fc._failed


def aux(rows, slots, width, dtype, seed):
    # hidden-state-like: a per-slot mean direction of its own scale, per-token noise
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([0.05, 4.0, 20.0][:slots])[None, :, None]
    x = (torch.randn(1, slots, width, generator=g) + 0.5 * torch.randn(rows, slots, width, generator=g)) * scale
    x = x.to(dtype)
    x[rows // 3, 1 % slots, 5] = float("nan")  # a NaN row in one slot
    x[rows // 2, 0, 2] = float("inf")  # an Inf row
    x[rows - 1, slots - 1, 0] = float("-inf")
    return x


out = {}
cases = {
    "f32 37x3x100": aux(37, 3, 100, torch.float32, 1),
    "f32 9x2x20": aux(9, 2, 20, torch.float32, 2),
    # fingerprint() hands the kernels an evenly strided view of a large batch
    "bf16 300x3x300 [::3]": aux(300, 3, 300, torch.bfloat16, 3)[::3],
    "f16 64x2x1030": aux(64, 2, 1030, torch.float16, 4),
}
for name, x in cases.items():
    sk = fp._sketch_on(x.device, int(x.shape[2]))
    got = {
        "two_kernels_sampled": fc._launch(x, sk, fc.SAMPLED_CONFIG),
        "two_kernels_full": fc._launch(x, sk, fc.CONFIG),
        "onepass": op.raw_stats(x, sk),
        "onepass_again": op.raw_stats(x, sk),  # its arrival counter must be reset by the first call
    }
    # into a caller's buffer, as into pinned host memory on a GPU (the interpreter takes tensors
    # only, not the fc.HostPointer that hands a pinned buffer's address to the device)
    host = torch.full(got["onepass"].shape, -7.0)
    op.raw_stats(x, sk, out=host)
    got["onepass_into_host_buffer"] = host
    src = got["two_kernels_sampled"]
    copied = torch.full(src.shape, -7.0)
    fc._kernels[2][(1,)](src, copied, src.numel(), NP2=fc._next_pow2(src.numel()), num_warps=1)
    got["copy_kernel"] = copied
    out[name] = {
        "ref": fp._raw_stats(x).tolist(),
        "got": {k: None if v is None else v.tolist() for k, v in got.items()},
    }
print("@@" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def kernels() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=TRITON_DIR, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD_S,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1]
    return json.loads(line[2:])


def _assert_same_stats(got: list, ref: list, what: str) -> None:
    import numpy as np

    g, r = np.array(got), np.array(ref)
    assert g.shape == r.shape, what
    # NaN / Inf row counts (4, 5) and finite max / min (2, 3) exactly; sums to fp32 accumulation order
    np.testing.assert_array_equal(g[:, 2:6], r[:, 2:6], err_msg=what)
    for col in (0, 1):
        np.testing.assert_allclose(
            g[:, col], r[:, col], rtol=1e-4, atol=1e-4 * np.abs(r[:, col]).max(), err_msg=what
        )
    sk_scale = np.abs(r[:, 6:]).max()
    np.testing.assert_allclose(g[:, 6:], r[:, 6:], rtol=1e-4, atol=1e-4 * sk_scale, err_msg=what)


@pytest.mark.parametrize(
    "variant",
    ["two_kernels_sampled", "two_kernels_full", "onepass", "onepass_again", "onepass_into_host_buffer"],
)
def test_kernel_stats_equal_the_torch_path(kernels: dict, variant: str) -> None:
    for name, case in kernels.items():
        _assert_same_stats(case["got"][variant], case["ref"], f"{variant} on {name}")


def test_bad_rows_are_counted_and_left_out(kernels: dict) -> None:
    ref = kernels["f32 37x3x100"]["ref"]
    assert [row[4] for row in ref] == [0.0, 1.0, 0.0]  # the NaN row, in slot 1
    assert [row[5] for row in ref] == [1.0, 0.0, 1.0]  # the Inf row (slot 0), the -Inf value (slot 2)
    # and what the kernels count is the same (the per-variant test compares every cell)
    assert kernels["f32 37x3x100"]["got"]["onepass"][1][4] == 1.0


def test_copy_kernel_writes_the_result_into_host_memory(kernels: dict) -> None:
    for name, case in kernels.items():
        assert case["got"]["copy_kernel"] == case["got"]["two_kernels_sampled"], name
