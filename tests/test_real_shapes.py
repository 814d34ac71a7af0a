"""The real-shape pairs benchmarks/gpu/shapes.py writes for the device's overhead runs (issue 30),
checked before any device time is spent on them: ``eagle3-top preflight --from-table`` predicts a
healthy layer map for each (what a user pointing SGLang 0.5.17 at these directories relies on), the
draft's fc input is 3 x the target's width, and the vocabularies and layer ids agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from patience import HANG_GUARD_S

ROOT = Path(__file__).resolve().parent.parent
SHAPES_PY = ROOT / "benchmarks" / "gpu" / "shapes.py"
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
CHAIN = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
SHAPES = ("llama8b", "kimi-wide", "wide-llama")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("shapes")
    r = subprocess.run([sys.executable, str(SHAPES_PY), str(out), *SHAPES],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)  # fmt: skip
    assert r.returncode == 0, r.stderr
    infos = [json.loads(line) for line in r.stdout.splitlines()]
    return {i["shape"]: i for i in infos}


def _config(info: dict[str, Any], part: str) -> dict[str, Any]:
    with open(Path(info["dir"]) / part / "config.json") as f:
        d: dict[str, Any] = json.load(f)
    return d


def _preflight(info: dict[str, Any]) -> dict[str, Any]:
    d = Path(info["dir"])
    r = subprocess.run(
        [*CLI, "preflight", "--model-path", str(d / "target"), "--speculative-draft-model-path",
         str(d / "draft"), "--sglang-version", "0.5.17", *CHAIN, "--from-table", "--json"],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_each_shape_writes_configs_only(written: dict[str, dict[str, Any]]) -> None:
    assert set(written) == set(SHAPES)
    for info in written.values():
        for part in ("target", "draft"):
            assert sorted(p.name for p in (Path(info["dir"]) / part).iterdir()) == ["config.json"]


@pytest.mark.parametrize("shape", SHAPES)
def test_preflight_predicts_a_healthy_layer_map(written: dict[str, dict[str, Any]], shape: str) -> None:
    info = written[shape]
    out = _preflight(info)
    layer_errors = [f for f in out["findings"] if f["code"].startswith("LAYER_") and f["severity"] == "error"]
    assert out["verdict"] == "pass" and not layer_errors, out["findings"]
    model, aux = out["hello"]["model"], out["hello"]["aux"]
    assert (model["hidden_size"], model["vocab_size"], model["num_layers"]) == (
        info["hidden"], info["vocab"], info["num_layers"])  # fmt: skip
    # three slots of the target's width, and the draft's fc takes exactly that
    assert (
        aux["slots"] == 3 and aux["width"] == aux["expected_width"] == info["aux_width"] == 3 * info["hidden"]
    )
    # shapes.py's own account of the capture (what run_shapes.sh logs) is SGLang's, as the rules say
    assert aux["capture_native"] == info["capture"]["native"]
    assert aux["capture_canonical"] == info["capture"]["canonical"]
    native = aux["capture_native"]
    assert native == sorted(set(native)) and 0 < native[0] and native[-1] < info["num_layers"]


@pytest.mark.parametrize("shape", SHAPES)
def test_draft_fits_the_target(written: dict[str, dict[str, Any]], shape: str) -> None:
    info = written[shape]
    target, draft = _config(info, "target"), _config(info, "draft")
    assert draft["hidden_size"] == target["hidden_size"]  # the fc input is 3 x this, read from the draft
    assert draft["vocab_size"] == target["vocab_size"] and draft["draft_vocab_size"] <= draft["vocab_size"]
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"]
    ids = (draft.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    assert ids == info["ids"]


def test_the_published_pairs_are_kept_where_they_can_be(written: dict[str, dict[str, Any]]) -> None:
    pub = ROOT / "tests" / "data" / "published"
    for name, part in (("llama3.1-Meta-Llama-3.1-8B-target.json", "target"),
                       ("llama3.1-Llama-3.1-8B-Instruct-specforge-draft.json", "draft")):  # fmt: skip
        assert _config(written["llama8b"], part) == json.loads((pub / name).read_text())
    kimi = json.loads((pub / "kimik2-Kimi-K2-Instruct-target.json").read_text())
    cut = _config(written["kimi-wide"], "target")
    # dense (deepseek_v2.py's _is_layer_sparse: MoE only from first_k_dense_replace on), bf16, few layers
    assert cut["first_k_dense_replace"] == cut["num_hidden_layers"] < kimi["num_hidden_layers"]
    assert "quantization_config" not in cut and cut["model_type"] == "deepseek_v3"
    kept = {k: v for k, v in kimi.items() if k not in (
        "num_hidden_layers", "first_k_dense_replace", "quantization_config", "model_type", "auto_map")}  # fmt: skip
    assert {k: cut[k] for k in kept} == kept
    # AQ-MedAI's published [2, 30, 58] are SGLang's default [2, n // 2, n - 3] at Kimi's 61 layers;
    # the cut target gets the same rule at its own depth
    n = kimi["num_hidden_layers"]
    pub_ids = json.loads((pub / "kimik2-Kimi-K2-Instruct-AQ-MedAI-draft.json").read_text())["eagle_config"]
    assert pub_ids["eagle_aux_hidden_state_layer_ids"] == [2, n // 2, n - 3]
    m = cut["num_hidden_layers"]
    assert written["kimi-wide"]["ids"] == [2, m // 2, m - 3]
