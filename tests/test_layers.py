"""The layer convention and SGLang's per-family rules (tracer/engines/sglang/capture.py), and reading what a live
target holds (tracer/serving/wiring.py): plain objects, no engine. The same rules are checked against SGLang's
real model classes in test_sglang_wiring.py."""

from __future__ import annotations

from types import SimpleNamespace

from eagle3_top.tracer.engines.sglang import capture as ln
from eagle3_top.tracer.serving.wiring import LiveCapture, live_capture


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
    assert live_capture(flagged) == LiveCapture([1, 4], "_is_layer_to_capture", True)
    listed = SimpleNamespace(
        model=SimpleNamespace(layers=layers, layers_to_capture=[5, 2]), capture_aux_hidden_states=True
    )
    assert live_capture(listed).native == [5, 2]
    vl = SimpleNamespace(language_model=listed)  # multimodal wrappers delegate
    assert live_capture(vl).native == [5, 2]
    assert live_capture(SimpleNamespace()).native is None
