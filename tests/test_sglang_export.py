"""What ``eagle3-top toy export`` writes, read by SGLang's own loaders on CPU: its config reader, its
layer-id resolution, and the real target's and draft's ``load_weights`` fed by SGLang's safetensors
iterator. ``make test`` runs this file against SGLang 0.5.23 and 0.5.17 (the release on the H200)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402
from patience import HANG_GUARD_S
from sglang_objects import server_args, sglang_models  # noqa: E402

SPEC = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}

# -- child side (runs with the stand-ins installed) --------------------------------------------------


def _load(model: Any, directory: str) -> None:
    from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator

    model.load_weights(safetensors_weights_iterator([os.path.join(directory, "model.safetensors")]))


def _file(directory: str) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(os.path.join(directory, "model.safetensors"))


def _serve(out: str, draft: str, target_name: str = "target") -> dict[str, Any]:
    """What SGLang makes of an exported target with ``draft``: the ids it reads, the layers its
    target captures, and whether its loaders put every tensor of the files where it belongs."""
    import torch

    tdir, ddir = os.path.join(out, target_name), os.path.join(out, draft)
    aux, target, draft_model, mc, dmc = sglang_models(server_args(tdir, ddir, **SPEC), ddir)
    _load(target, tdir)
    _load(draft_model, ddir)

    t, d = _file(tdir), _file(ddir)
    tp = dict(target.named_parameters())
    dp = dict(draft_model.named_parameters())
    q, k, v = (t[f"model.layers.3.self_attn.{p}_proj.weight"] for p in "qkv")
    same = {
        "embed": torch.equal(tp["model.embed_tokens.weight"].float(), t["model.embed_tokens.weight"].float()),
        "qkv": torch.equal(
            tp["model.layers.3.self_attn.qkv_proj.weight"].float(), torch.cat([q, k, v]).float()
        ),
        "gate_up": torch.equal(
            tp["model.layers.7.mlp.gate_up_proj.weight"].float(),
            torch.cat(
                [t["model.layers.7.mlp.gate_proj.weight"], t["model.layers.7.mlp.up_proj.weight"]]
            ).float(),
        ),
        "lm_head": torch.equal(tp["lm_head.weight"].float(), t["lm_head.weight"].float()),
        "qkv_bias": "model.layers.3.self_attn.qkv_proj.bias" not in tp
        or torch.equal(
            tp["model.layers.3.self_attn.qkv_proj.bias"].float(),
            torch.cat([t[f"model.layers.3.self_attn.{p}_proj.bias"] for p in "qkv"]).float(),
        ),
        "draft_fc": torch.equal(dp["model.fc.weight"].float(), d["fc.weight"].float()),
        "draft_lm_head": torch.equal(dp["lm_head.weight"].float(), d["lm_head.weight"].float()),
        "hot_token_id": torch.equal(draft_model.hot_token_id, d["d2t"] + torch.arange(d["d2t"].shape[0])),
    }
    return {
        "class": type(target).__name__,
        "ids": aux.eagle_aux_hidden_state_layer_ids,
        "capture": sorted(target.model.layers_to_capture),
        "eos": [mc.hf_config.eos_token_id, dmc.hf_config.eos_token_id],
        "draft_fc_in": int(dp["model.fc.weight"].shape[1]),
        "same": same,
    }


def child_export() -> dict[str, Any]:
    sglang_cpu.init_process_group()
    out = os.environ["E3T_EXPORT_DIR"]
    got = {name: _serve(out, name) for name in ("draft-no-embed", "draft-no-embed-ids-not-read", "draft")}
    got["draft on target-qwen2"] = _serve(out, "draft", "target-qwen2")
    return got


# -- test side ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("export") / "pair"
    r = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "toy", "export", "--out", str(out), "--models-only"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert r.returncode == 0, r.stderr
    return sglang_cpu.run_child("test_sglang_export", "child_export", env={"E3T_EXPORT_DIR": str(out)})


def test_sglang_loads_every_tensor_where_it_belongs(served: dict[str, Any]) -> None:
    for name, got in served.items():
        assert got["same"] == dict.fromkeys(got["same"], True), name
        assert got["eos"] == [8, 8], name  # stated, not transformers' default 2 (the separator)
        assert got["draft_fc_in"] == 3 * 128


def test_sglang_reads_the_healthy_drafts_layers_and_misses_the_mis_wired_ones(served: dict[str, Any]) -> None:
    # canonical k = output of block k; SGLang captures at the input of layer k + 1
    assert (served["draft-no-embed"]["ids"], served["draft-no-embed"]["capture"]) == ([0, 2, 5], [1, 3, 6])
    assert served["draft"]["ids"] == [-1, 2, 5] and served["draft"]["capture"] == [0, 3, 6]
    # the same target through SGLang's Qwen2 class (zero q/k/v biases, loaded into its fused qkv)
    qwen2 = served["draft on target-qwen2"]
    assert (qwen2["class"], qwen2["ids"], qwen2["capture"]) == ("Qwen2ForCausalLM", [-1, 2, 5], [0, 3, 6])
    assert served["draft"]["class"] == "LlamaForCausalLM"
    # ids at the config's top level: SGLang falls back to its default, layers [2, 4, 5] of 8
    assert served["draft-no-embed-ids-not-read"]["capture"] == [2, 4, 5]
