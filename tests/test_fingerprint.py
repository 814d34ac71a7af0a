"""The aux fingerprint against numbers computed directly, on CPU (and CUDA when present)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eagle3_top.tracer.serving.fingerprint import SKETCH_DIM, fingerprint_now, sketch_cosine, sketch_matrix  # noqa: E402


def _aux(rows: int = 41, width: int = 64, scales: tuple[float, ...] = (0.05, 4.0, 20.0)) -> torch.Tensor:
    # Like real hidden states: each slot has its own mean direction, plus per-token noise.
    g = torch.Generator().manual_seed(3)
    scale = torch.tensor(scales)[None, :, None]
    direction = torch.randn(1, len(scales), width, generator=g)
    x = (direction + 0.5 * torch.randn(rows, len(scales), width, generator=g)) * scale
    return x.reshape(rows, -1)


def test_per_slot_statistics_match_direct_computation() -> None:
    x = _aux()
    fp = fingerprint_now(x, 3)
    x3 = x.view(x.shape[0], 3, -1).double()
    np.testing.assert_allclose(fp.mean, x3.mean((0, 2)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(fp.std, x3.std((0, 2), unbiased=False).numpy(), rtol=1e-4)
    np.testing.assert_allclose(fp.rms, x3.pow(2).mean((0, 2)).sqrt().numpy(), rtol=1e-5)
    np.testing.assert_allclose(fp.absmax, x3.abs().amax((0, 2)).numpy(), rtol=1e-6)
    assert fp.rows == 41 and fp.slots == 3 and fp.slot_width == 64
    assert np.array(fp.sketch).shape == (3, SKETCH_DIM)


def test_sketch_tells_slots_apart_and_is_stable_across_calls() -> None:
    x = _aux()
    a, b = fingerprint_now(x, 3), fingerprint_now(x[:20], 3)
    assert sketch_cosine(a.sketch[1], b.sketch[1]) > 0.95
    # slot 1 against slot 2 (another layer's direction): unrelated
    assert abs(sketch_cosine(a.sketch[1], a.sketch[2])) < 0.6
    np.testing.assert_array_equal(sketch_matrix(64), sketch_matrix(64))


def test_non_finite_rows_are_counted_and_do_not_blank_the_rest() -> None:
    x = _aux()
    clean = fingerprint_now(x, 3)
    x[4, 70] = float("nan")  # slot 1
    x[9, 150] = float("inf")  # slot 2
    fp = fingerprint_now(x, 3)
    assert fp.nan == (0, 1, 0)
    assert fp.inf == (0, 0, 1)
    assert all(np.isfinite(fp.mean)) and all(np.isfinite(fp.absmax))
    assert fp.mean[0] == pytest.approx(clean.mean[0])


def test_bf16_input_accumulates_in_fp32() -> None:
    x = _aux()
    a, b = fingerprint_now(x, 3), fingerprint_now(x.to(torch.bfloat16), 3)
    np.testing.assert_allclose(a.rms, b.rms, rtol=1e-2)


def test_width_not_divisible_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        fingerprint_now(_aux()[:, :100], 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_adds_no_host_sync() -> None:
    from eagle3_top.tracer.serving.fingerprint import fingerprint

    x = _aux().cuda().to(torch.bfloat16)
    fingerprint(x, 3)  # warm-up: sketch matrix upload is a one-off copy
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = fingerprint(x, 3)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    fp = pending.resolve()
    ref = fingerprint_now(x.float().cpu(), 3)
    np.testing.assert_allclose(fp.rms, ref.rms, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("shape", [(37, 3, 100), (1024, 3, 7168), (300, 2, 4096)])
def test_fused_cuda_path_agrees_with_the_torch_path(shape: tuple[int, int, int]) -> None:
    from eagle3_top.tracer.serving import fingerprint_cuda
    from eagle3_top.tracer.serving.fingerprint import _raw_stats, _sketch_on

    if not fingerprint_cuda.available():
        pytest.skip(f"triton unavailable: {fingerprint_cuda._failed}")
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda").to(torch.bfloat16)
    x[3, 1, 5] = float("nan")
    x[20, 0, 7] = float("inf")
    x[-1, -1, -1] = -float("inf")
    sk = _sketch_on(x.device, shape[2])
    fused = fingerprint_cuda._launch(x, sk, fingerprint_cuda.CONFIG).cpu().numpy()
    ref = _raw_stats(x).cpu().numpy()
    np.testing.assert_allclose(fused, ref, rtol=2e-3, atol=2e-2 * max(1.0, shape[0] / 100))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_copy_reuses_pinned_buffers() -> None:
    from eagle3_top.tracer.serving.deferred import PINNED, HostCopy

    t = torch.arange(10, device="cuda")
    HostCopy(t).resolve()
    before = PINNED.allocated
    for i in range(5):
        np.testing.assert_array_equal(HostCopy(t + i).resolve(), np.arange(10) + i)
    assert PINNED.allocated == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_large_gpu_batches_are_fingerprinted_on_strided_rows() -> None:
    from eagle3_top.tracer.serving.fingerprint import MAX_DEVICE_ROWS

    x = _aux(rows=1024).cuda()
    fp = fingerprint_now(x, 3)
    step = 1024 // MAX_DEVICE_ROWS
    assert fp.rows == MAX_DEVICE_ROWS and fp.rows_total == 1024
    ref = fingerprint_now(x[::step].cpu(), 3)
    np.testing.assert_allclose(fp.rms, ref.rms, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_serving_path_snapshot_is_the_fingerprint_of_the_rows_when_taken() -> None:
    """The serving thread queues a copy of the sampled rows and an event; the reduction runs on the
    sender thread's stream. Neither half syncs the host, and a buffer the engine overwrites right
    after (a CUDA graph's next replay) does not change what was taken."""
    import threading

    from eagle3_top.tracer.serving.fingerprint import fingerprint_snapshot

    x = _aux(rows=1024).cuda().to(torch.bfloat16)
    before = x.clone()
    fingerprint_snapshot(x, 3).resolve()  # warm-up: sketch upload, kernel compile, side stream
    torch.cuda.set_sync_debug_mode("error")
    try:
        snap = fingerprint_snapshot(x, 3)
        x.mul_(3.0)
        got: list = []
        t = threading.Thread(target=lambda: got.append(snap.resolve()))
        t.start()
        t.join()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    ref = fingerprint_now(before, 3)
    assert got and got[0].rows_total == 1024 and got[0].rows == ref.rows
    np.testing.assert_allclose(got[0].rms, ref.rms, rtol=1e-3)
    np.testing.assert_allclose(got[0].sketch, ref.sketch, rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_copy_without_its_own_event_waits_for_the_engines() -> None:
    from eagle3_top.tracer.serving.deferred import HostCopy

    t = torch.arange(10, device="cuda")
    c = HostCopy(t, record=False)
    assert c.unsealed
    with pytest.raises(RuntimeError, match="before any event"):
        c.resolve()
    done = torch.cuda.Event()
    done.record()  # the engine's event after its own copies: it follows ours in stream order
    c.bind(done)
    np.testing.assert_array_equal(c.resolve(), np.arange(10))
    sealed = HostCopy(t + 1, record=False)
    sealed.seal()
    np.testing.assert_array_equal(sealed.resolve(), np.arange(10) + 1)
