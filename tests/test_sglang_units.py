"""The SGLang adapter's pure parts: no sglang needed (and none imported)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from eagle3_top.hooks.sglang import layers_native as ln
from eagle3_top.hooks.sglang.launch import split_own_args
from eagle3_top.hooks.sglang.plugin import endpoint_for_rank, version_supported
from eagle3_top.hooks.sglang.wiring import spec_report


def test_adapter_modules_import_without_sglang() -> None:
    code = (
        "import sys, os; os.environ.pop('EAGLE3_TOP_PUBLISH', None)\n"
        "import eagle3_top.hooks.sglang.plugin as p, eagle3_top.hooks.sglang.wiring, "
        "eagle3_top.hooks.sglang.verify, eagle3_top.hooks.sglang.launch\n"
        "p.register()\n"
        "assert 'sglang' not in sys.modules, 'register() without EAGLE3_TOP_PUBLISH must not import sglang'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    "v,ok",
    [
        ("0.5.17", True),
        ("0.5.23", True),
        ("0.5.20.post1", True),
        ("0.5.16", False),
        ("0.5.24", False),
        ("0.6.0", False),
        (None, False),
        ("dev", False),
    ],
)
def test_version_range(v: str | None, ok: bool) -> None:
    assert version_supported(v) is ok


def test_endpoint_per_rank() -> None:
    assert endpoint_for_rank("tcp://127.0.0.1:5557", 0) == "tcp://127.0.0.1:5557"
    assert endpoint_for_rank("tcp://127.0.0.1:5557", 3) == "tcp://127.0.0.1:5560"
    assert endpoint_for_rank("ipc:///tmp/e3t", 1) == "ipc:///tmp/e3t.r1"


def test_launcher_strips_its_own_flag() -> None:
    argv = ["--model-path", "m", "--eagle3-top-publish", "tcp://127.0.0.1:6000", "--port", "30000"]
    assert split_own_args(argv) == (["--model-path", "m", "--port", "30000"], "tcp://127.0.0.1:6000")
    assert split_own_args(["--eagle3-top-publish=tcp://x:1", "--tp", "2"]) == (["--tp", "2"], "tcp://x:1")
    assert split_own_args(["--tp", "2"]) == (["--tp", "2"], None)


def test_native_rules_per_family() -> None:
    n = 8
    assert ln.native_from_ids(ln.LLAMA, None, n) == [2, 4, 5]
    assert ln.native_from_ids(ln.LLAMA, [-1, 2, 5], n) == [0, 3, 6]
    assert ln.native_from_ids(ln.DEEPSEEK, [1, 3, 5], n) == [2, 4, 6]
    assert ln.native_from_ids(ln.DEEPSEEK, [2, 4, 6], n) == [2, 4, 6]
    assert ln.native_from_ids(ln.GPT_OSS, [0, 3, 8], n) == [0, 3, 8]
    assert ln.native_from_ids(ln.GPT_OSS, [0, 3, 7], n) == [1, 4, 8]
    assert ln.family_of(None, "DeepseekV3ForCausalLM") == ln.DEEPSEEK
    assert ln.family_of(None, "KimiK25ForConditionalGeneration") == ln.DEEPSEEK
    assert ln.family_of(None, "Qwen3ForCausalLM") == ln.LLAMA


def test_canonical_from_native() -> None:
    n = 8
    assert ln.canonical_from_native(ln.LLAMA, [4, 1, 3], n) == [0, 2, 3]  # ascending
    assert ln.canonical_from_native(ln.LLAMA, [3, 3, 4], n) == [2, 3]  # once
    assert ln.canonical_from_native(ln.LLAMA, [1, 3, 8], n) == [0, 2]  # never reached
    assert ln.canonical_from_native(ln.GPT_OSS, [0, 3, 8], n) == [-1, 2, 7]  # boundary n
    assert ln.capture_failure(ln.DEEPSEEK, [-1, 2, 5], n) is not None
    assert ln.capture_failure(ln.LLAMA, [-1, 2, 5], n) is None


def test_live_capture_reads_lists_and_flags() -> None:
    layers = [SimpleNamespace() for _ in range(6)]
    for i in (4, 1):
        layers[i]._is_layer_to_capture = True
    flagged = SimpleNamespace(model=SimpleNamespace(layers=layers), capture_aux_hidden_states=True)
    assert ln.live_capture(flagged) == {
        "native": [1, 4],
        "source": "_is_layer_to_capture",
        "capture_aux": True,
    }
    listed = SimpleNamespace(
        model=SimpleNamespace(layers=layers, layers_to_capture=[5, 2]), capture_aux_hidden_states=True
    )
    assert ln.live_capture(listed)["native"] == [5, 2]
    vl = SimpleNamespace(language_model=listed)  # multimodal wrappers delegate
    assert ln.live_capture(vl)["native"] == [5, 2]
    assert ln.live_capture(SimpleNamespace())["native"] is None


def test_spec_report_without_requested_values_reports_no_rewrites() -> None:
    sa = SimpleNamespace(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        max_running_requests=48,
    )
    rep = spec_report(sa, argv=[])
    assert rep["requested_source"] == "unknown"
    assert (
        rep["requested"]
        == rep["effective"]
        == {"algorithm": "EAGLE3", "num_steps": 3, "topk": 1, "num_draft_tokens": 4}
    )
    assert rep["rewrites"] == []
    live = spec_report(sa, argv=[], live={"num_draft_tokens": 5})
    assert live["effective"]["num_draft_tokens"] == 5


def test_record_verify_on_plain_tensors() -> None:
    torch = pytest.importorskip("torch")
    from eagle3_top.hooks.sglang.verify import record_verify

    calls: list = []

    class T:
        enabled = True

        def record_step(self, *a, **k):
            calls.append(("step", a, k))

        def want_aux(self):
            return True

        def record_aux(self, h, where="x"):
            calls.append(("aux", h.shape, where))

    si = SimpleNamespace(
        draft_token=torch.arange(1, 9),
        topk=1,
        draft_token_num=4,
        retrieve_next_token=None,
        retrieve_next_sibling=None,
    )
    batch = SimpleNamespace(
        reqs=[SimpleNamespace(rid="a"), SimpleNamespace(rid="b")], spec_info=si, forward_mode=None
    )
    res = SimpleNamespace(
        accept_lens=torch.tensor([1, 3]),
        next_token_ids=torch.arange(8),
        logits_output=SimpleNamespace(hidden_states=torch.zeros(8, 6)),
    )
    assert record_verify(T(), batch, res, 0.1)
    assert calls[0][0] == "step" and calls[0][1][0] == ["a", "b"] and calls[0][2]["topk"] == 1
    assert calls[1] == ("aux", (8, 6), "verify_aux")
    # a width we do not know (padded batch) is skipped, not guessed
    si.draft_token_num = 3
    assert not record_verify(T(), batch, res)
    # idle
    assert not record_verify(T(), SimpleNamespace(reqs=[], spec_info=si), res)
