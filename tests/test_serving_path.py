"""The verify hooks' serving path: a held step takes SGLang's own host copies of the accept lengths
and committed tokens (after waiting for SGLang's ``copy_done``) instead of copying them itself, and
copies them when SGLang made none. CPU tensors stand in for the device's; a stand-in event says
when SGLang's copy is done."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eagle3_top.hooks.sglang import verify  # noqa: E402
from eagle3_top.hooks.sglang.verify import make_around_process_result, make_around_verify  # noqa: E402
from eagle3_top.tracer.schema import STEP  # noqa: E402
from eagle3_top.tracer.serving.publisher import MemoryPublisher  # noqa: E402
from eagle3_top.tracer.serving.tracer import Tracer  # noqa: E402


class CopyDone:
    """SGLang's copy_done event: not done for the first ``pending`` queries."""

    def __init__(self, pending: int) -> None:
        self.pending, self.queries = pending, 0

    def query(self) -> bool:
        self.queries += 1
        return self.queries > self.pending


def _verify_objects(bs: int = 3, n: int = 4) -> tuple[Any, Any, dict[str, Any]]:
    g = torch.Generator().manual_seed(7)
    draft = torch.randint(5, 900, (bs * n,), generator=g)
    accept = torch.tensor([1, 4, 2][:bs], dtype=torch.int32)
    tokens = torch.randint(5, 900, (bs * n,), generator=g)
    reqs = [SimpleNamespace(rid=f"req-{i}", finished_reason=None, is_retracted=False) for i in range(bs)]
    si = SimpleNamespace(
        draft_token=draft, topk=1, draft_token_num=n, retrieve_next_token=None, retrieve_next_sibling=None
    )
    batch = SimpleNamespace(spec_info=si, reqs=reqs, forward_mode=None)
    result = SimpleNamespace(accept_lens=accept, next_token_ids=tokens, logits_output=None, copy_done=None)
    keep = np.arange(n)[None, :] < accept.numpy()[:, None]
    expect = {
        "rids": [r.rid for r in reqs],
        "draft": draft.numpy().reshape(bs, n),
        "accept": accept.numpy().copy(),
        "tokens": tokens.numpy().reshape(bs, n)[keep],
    }
    return batch, result, expect


def _held_step() -> tuple[MemoryPublisher, Any, Any, Any, dict[str, Any]]:
    """A verify through the hook, its step held on the result: (publisher, the result hook, batch,
    result, what the step must say)."""
    pub = MemoryPublisher()
    tracer = Tracer(pub)  # type: ignore[arg-type]
    around_verify = make_around_verify(lambda _w: tracer, hold=lambda: True)
    batch, result, expect = _verify_objects()
    assert around_verify(lambda _s, _b: result, None, batch) is result
    assert pub.events == []  # held on the result until SGLang processes it
    return pub, make_around_process_result(), batch, result, expect


def _published(pub: MemoryPublisher) -> Any:
    """The one step event's columns, as they go on the wire."""
    bodies = pub.bodies(STEP)
    assert len(bodies) == 1 and pub.hook_errors == 0, pub.last_error
    b = bodies[0]
    return SimpleNamespace(
        rids=list(b["rids"]),
        draft=np.frombuffer(b["draft"], "<i4").reshape(b["batch"], b["n"]),
        accept_lens=np.frombuffer(b["accepted"], "<i4") + 1,  # the wire counts drafts, not the bonus
        tokens=np.frombuffer(b["tokens"], "<i4"),
    )


def _same(view: Any, expect: dict[str, Any]) -> None:
    assert view.rids == expect["rids"]
    np.testing.assert_array_equal(view.draft, expect["draft"])
    np.testing.assert_array_equal(view.accept_lens, expect["accept"])
    np.testing.assert_array_equal(view.tokens, expect["tokens"])


def test_a_held_step_reads_sglangs_own_host_copies_once_copy_done_says_so() -> None:
    pub, around_process, batch, result, expect = _held_step()
    # SGLang's copy_to_cpu: host copies replace the device tensors, copy_done follows them
    device_accept, device_tokens = result.accept_lens, result.next_token_ids
    result.accept_lens, result.next_token_ids = device_accept.clone(), device_tokens.clone()
    result.copy_done = CopyDone(pending=2)
    # what the device tensors hold afterwards is not what SGLang processed: the stream must not see it
    device_accept.fill_(0)
    device_tokens.fill_(1)
    processed = []
    around_process(
        lambda _s, b, r: processed.append((b, r)), SimpleNamespace(enable_overlap=False), batch, result
    )
    assert processed == [(batch, result)]
    _same(_published(pub), expect)
    assert result.copy_done.queries >= 3  # the sender waited for SGLang's copies
    assert verify.ENGINE_COPIES["seen"]


def test_without_sglangs_copies_the_step_copies_them_when_processed() -> None:
    pub, around_process, batch, result, expect = _held_step()
    # a release whose results stay on the device (no copy_done): ours are made at processing time
    around_process(lambda _s, _b, _r: None, SimpleNamespace(enable_overlap=False), batch, result)
    _same(_published(pub), expect)
    assert not verify.ENGINE_COPIES["seen"]


def test_overlap_leaves_out_the_rows_sglang_skips_without_reading_rids_on_the_serving_thread() -> None:
    pub, around_process, batch, result, expect = _held_step()
    batch.reqs[1].finished_reason = "length"  # finished one step earlier: SGLang skips its row
    around_process(lambda _s, _b, _r: None, SimpleNamespace(enable_overlap=True), batch, result)
    view = _published(pub)
    assert view.rids == ["req-0", "req-2"] and pub.discarded_rows == 1
    np.testing.assert_array_equal(view.accept_lens, expect["accept"][[0, 2]])
