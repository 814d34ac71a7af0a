"""The shared-memory ring and the step record: what the serving thread writes is what the sidecar
reads, across wrap-arounds, a full ring and bytes that are not ours."""

from __future__ import annotations

import os
import random

import msgpack
import numpy as np
import pytest
import torch
from eagle3_top.tracer.serving.pending import DeferredStep
from eagle3_top.tracer.serving.ring import HEADER, STEP_RECORD, Ring, RingError
from eagle3_top.tracer.serving.step_record import RecordError, step_from_record, step_parts


@pytest.fixture
def ring() -> Ring:
    r = Ring.create(64 * 1024)
    yield r
    r.close()


def test_records_come_back_in_order_across_wraps(ring: Ring) -> None:
    rng = random.Random(7)
    sent: list[bytes] = []
    got: list[bytes] = []
    for i in range(3000):  # ~20 times round the ring
        payload = rng.randbytes(rng.randint(0, 3000))
        assert ring.write(2, [payload[:10], memoryview(payload)[10:]])
        sent.append(payload)
        if i % 7 == 6:  # the consumer runs behind, then catches up
            got += [p for _, _, p in ring.take()]
    got += [p for _, _, p in ring.take()]
    assert got == sent
    assert ring.dropped == 0 and ring.pending_bytes() == 0


def test_a_full_ring_drops_counts_and_says_so_on_the_next_record(ring: Ring) -> None:
    payload = os.urandom(4000)
    written = 0
    while ring.write(1, [payload]):
        written += 1
    assert not ring.write(1, [payload]) and ring.dropped == 2
    records = ring.take()
    assert len(records) == written and all(lost == 0 for _, lost, _ in records)
    assert ring.write(1, [b"after"])
    assert ring.take() == [(1, 2, b"after")]  # two events lost just before this one


def test_a_consumer_refuses_bytes_no_producer_wrote(ring: Ring) -> None:
    ring.write(1, [os.urandom(100)])
    ring.buf[HEADER : HEADER + 4] = (1 << 30).to_bytes(4, "little")  # a record length past the ring
    with pytest.raises(RingError, match="out of bounds"):
        ring.take()


def test_attach_refuses_a_file_that_is_not_a_ring(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "x"
    f.write_bytes(os.urandom(4096))
    fd = os.open(f, os.O_RDWR)
    try:
        with pytest.raises(RingError, match="not an eagle3-top ring"):
            Ring.attach(fd)
    finally:
        os.close(fd)


def test_attach_sees_what_the_creator_wrote(ring: Ring) -> None:
    other = Ring.attach(os.dup(ring.fd))
    ring.write(3, [b"hello"])
    ring.set_field("hook_errors", 4)
    ring.set_started(123.5)
    assert other.take() == [(3, 0, b"hello")]
    assert other.state()["hook_errors"] == 4 and other.state()["started"] == 123.5
    assert ring.pending_bytes() == 0  # the reader's progress is the writer's free space
    other.close()


def _step(bs: int, n: int, topk: int, rids: list[str], seed: int) -> DeferredStep:
    g = torch.Generator().manual_seed(seed)
    draft = torch.randint(5, 128_000, (bs * n,), generator=g)
    acc = torch.randint(1, n + 1, (bs,), generator=g, dtype=torch.int32)
    nxt = torch.randint(5, 128_000, (bs * n,), generator=g, dtype=torch.int32)
    retrieve = None
    if topk > 1:  # a real tree: node k's first child 2k+1, next sibling k+1 when odd
        nt = torch.tensor([2 * k + 1 if 2 * k + 1 < n else -1 for k in range(n)] * bs, dtype=torch.int64)
        ns = torch.tensor(
            [k + 1 if k % 2 == 1 and k + 1 < n else -1 for k in range(n)] * bs, dtype=torch.int64
        )
        retrieve = (nt, ns)
    return DeferredStep(seed, rids, topk, 0.004, draft, acc, nxt, retrieve)


@pytest.mark.parametrize(
    ("bs", "n", "topk", "discard"),
    [(1, 4, 1, None), (32, 4, 1, 5), (64, 16, 1, None), (8, 7, 4, 2)],
)
def test_a_step_record_reads_back_as_the_in_process_body(
    bs: int, n: int, topk: int, discard: int | None
) -> None:
    rids = [f"{i:032x}" for i in range(bs)]
    step = _step(bs, n, topk, rids, seed=bs + n)
    if discard is not None:
        step.discard([i % discard == 0 for i in range(bs)])
    parts = step_parts(step, ts=1700000000.25)
    payload = b"".join(bytes(p) for p in parts)
    ts, body = step_from_record(payload)
    assert ts == 1700000000.25
    assert body == step.resolve()  # the bytes the wire would carry, column for column


@pytest.mark.parametrize(
    "rids",
    [["naïve-ø", "with\0nul", "", "x"], ["\udcff-lone-surrogate", "", "ok", "ünï"]],
    ids=["holding NUL", "a lone surrogate"],
)
def test_rids_that_are_not_plain_survive_the_record(rids: list[str]) -> None:
    step = _step(4, 4, 1, rids, seed=3)
    _, body = step_from_record(b"".join(bytes(p) for p in step_parts(step)))
    assert body["rids"] == rids


def test_a_record_whose_sizes_do_not_add_up_is_named() -> None:
    step = _step(4, 4, 1, ["a", "b", "c", "d"], seed=5)
    payload = b"".join(bytes(p) for p in step_parts(step))
    with pytest.raises(RecordError, match="past its end"):
        step_from_record(payload[:-8])
    with pytest.raises(RecordError, match="left over"):
        step_from_record(payload + b"\0" * 8)
    with pytest.raises(RecordError, match="shorter than its header"):
        step_from_record(payload[:10])


def test_the_ring_carries_a_records_bytes_unchanged(ring: Ring) -> None:
    step = _step(16, 4, 1, [f"r{i}" for i in range(16)], seed=11)
    assert ring.write(STEP_RECORD, step_parts(step, ts=5.0))
    ((kind, lost, payload),) = ring.take()
    assert (kind, lost) == (STEP_RECORD, 0)
    _, body = step_from_record(payload)
    assert body == step.resolve()
    assert np.frombuffer(body["draft"], "<i4").std() > 0  # real values, not a zero buffer
    assert msgpack.packb(body)  # and the body packs as the sender would


def test_a_ring_that_cannot_be_had_is_one_line_not_a_sigbus_later(monkeypatch: pytest.MonkeyPatch) -> None:
    import eagle3_top.tracer.serving.ring as ring_mod

    def no_room(fd: int, offset: int, size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ring_mod.os, "posix_fallocate", no_room)
    with pytest.raises(OSError, match=r"no room for the tracer's 1 MiB ring \(.*No space left on device"):
        Ring.create(1 << 20)
