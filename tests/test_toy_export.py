"""``eagle3-top toy export``: the built-in pair as Hugging Face directories. Run through the real
command; read back with safetensors and Hugging Face transformers, whose own Llama must compute what
the built-in engine computes (SGLang's loaders read them in test_sglang_export.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("torch") is None:
    pytest.skip("the built-in engine needs torch", allow_module_level=True)

import torch
from patience import HANG_GUARD_S

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
DRAFTS = ["draft", "draft-ids-not-read", "draft-no-embed", "draft-no-embed-ids-not-read", "draft-vllm",
          "draft-no-embed-vllm"]  # fmt: skip
STOP = 8  # <unk>


def export(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "toy", "export", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "pair"
    r = export(out, "--prompts", "4", "--new-tokens", "12")
    assert r.returncode == 0, r.stderr
    # a stage a line, with the seconds since the start: a long export is never silent
    stages = [
        ln.split("] ", 1)[1] for ln in r.stderr.splitlines() if ln.startswith("eagle3-top toy export: [")
    ]
    assert stages[0] == "the target and the drafts (safetensors)" and stages[-1] == "done"
    assert "draft: its training manifest (toy gen-data, then manifest build, as a user runs them)" in stages
    assert "the built-in engine's accept length with draft-ids-not-read" in stages
    return out


def config(path: Path) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((path / "config.json").read_text())
    return cfg


def test_every_directory_states_its_stop_token_and_holds_no_pickle(exported: Path) -> None:
    from safetensors import safe_open

    for name in ["target", "target-qwen2", *DRAFTS]:
        d = exported / name
        assert sorted(p.name for p in d.iterdir() if p.suffix in (".pt", ".bin", ".pth")) == []
        cfg = config(d)
        # transformers' default would be 2, the language's separator: a server would stop there
        assert (cfg["eos_token_id"], cfg["bos_token_id"]) == (STOP, 0), name
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            keys = set(f.keys())
            assert all(f.get_tensor(k).dtype in (torch.float16, torch.int64) for k in keys)
        if name == "target":
            assert "model.embed_tokens.weight" in keys and len(keys) == 75
        elif name == "target-qwen2":  # and a q, k and v bias per layer
            assert "model.layers.7.self_attn.v_proj.bias" in keys and len(keys) == 75 + 3 * 8
            # no tokenizer: transformers would load a qwen2 directory's as Qwen2Tokenizer, which
            # drops the language's words; the server is pointed at target/ instead
            assert not [p.name for p in d.iterdir() if p.name.startswith("tokenizer")]
        else:
            # SpecForge's names: vLLM's loader prefixes "model." itself and refuses "model.fc.weight"
            assert {
                "d2t",
                "fc.weight",
                "layers.0.hidden_norm.weight",
                "norm.weight",
                "lm_head.weight",
            } <= keys
            assert not [k for k in keys if k.startswith("model.")]
            assert json.loads((d / "training_metrics.json").read_text())["simulated_accept_length"] > 3.5


def test_the_drafts_name_their_layers_where_sglang_reads_them_or_not(exported: Path) -> None:
    nested = {
        n: config(exported / n).get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
        for n in DRAFTS
    }
    assert nested == {
        "draft": [-1, 2, 5],
        "draft-ids-not-read": None,
        "draft-no-embed": [0, 2, 5],  # no embedding slot, and apart from SGLang's default [1, 3, 4]
        "draft-no-embed-ids-not-read": None,
        "draft-vllm": [-1, 2, 5],
        "draft-no-embed-vllm": [0, 2, 5],
    }
    assert config(exported / "draft-no-embed-ids-not-read")["eagle_aux_hidden_state_layer_ids"] == [0, 2, 5]


def test_each_draft_says_which_convention_its_ids_follow_and_which_engine_serves_it_right(
    exported: Path,
) -> None:
    """The copies for vLLM carry vLLM-convention ids at the top level (canonical + 1, where vLLM reads
    first and SGLang never reads) beside SGLang's in eagle_config: one directory right on both."""
    table = json.loads((exported / "drafts.json").read_text())
    assert config(exported / "draft-no-embed-vllm")["eagle_aux_hidden_state_layer_ids"] == [1, 3, 6]
    assert config(exported / "draft-vllm")["eagle_aux_hidden_state_layer_ids"] == [
        0,
        3,
        6,
    ]  # 0: the embedding
    right = {name: sorted(e for e, v in row["engines"].items() if v["right"]) for name, row in table.items()}
    assert right == {
        "draft": ["sglang"],
        "draft-no-embed": ["sglang"],
        "draft-ids-not-read": [],
        "draft-no-embed-ids-not-read": [],
        "draft-vllm": ["sglang", "vllm"],
        "draft-no-embed-vllm": ["sglang", "vllm"],
    }
    # served on vLLM, SGLang-convention ids land one block early, and -1 is never reached
    assert table["draft-no-embed"]["engines"]["vllm"]["serves_canonical"] == [-1, 1, 4]
    assert "fails at the first request" in table["draft"]["engines"]["vllm"]["fails"]
    assert table["draft-no-embed-vllm"]["ids_written"]["top_level"]["convention"].startswith("vllm")


def test_transformers_computes_what_the_built_in_engine_computes(exported: Path) -> None:
    from eagle3_top.hooks.toy.model import load_target
    from eagle3_top.hooks.toy.paths import target_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work = json.loads((exported / "workload.json").read_text())
    prompts = torch.tensor(work["prompts"])
    assert prompts.shape == (4, 48) and (prompts[:, 0] == 0).all()
    hf = AutoModelForCausalLM.from_pretrained(str(exported / "target"), dtype=torch.float32).eval()
    ours = load_target(target_dir())
    with torch.no_grad():
        want, _ = ours(prompts)
        got = hf(prompts).logits
        assert torch.allclose(got, want, atol=2e-4, rtol=0), (got - want).abs().max()
        # its own greedy decoding gives the continuations the export wrote down for a client
        gen = hf.generate(prompts, max_new_tokens=12, do_sample=False, eos_token_id=STOP, pad_token_id=STOP)
    assert gen[:, 48:].tolist() == work["continuations"]
    # the Qwen2 copy is the same function through transformers' Qwen2 class
    qwen2 = AutoModelForCausalLM.from_pretrained(str(exported / "target-qwen2"), dtype=torch.float32).eval()
    assert type(qwen2).__name__ == "Qwen2ForCausalLM"
    with torch.no_grad():
        assert torch.allclose(qwen2(prompts).logits, want, atol=2e-4, rtol=0)
    assert work["stop_token_id"] == STOP and work["new_tokens"] == 12
    # what a served pair must reach: the built-in engine's own accept length with each draft
    acc = work["built_in_accept_length"]
    # the copies for vLLM are their drafts' weights: the built-in engine (SGLang's rules) serves them alike
    assert set(acc) == set(DRAFTS) - {"draft-vllm", "draft-no-embed-vllm"}
    assert work["built_in_spec"]["num_draft_tokens"] == 4
    assert min(acc["draft"], acc["draft-no-embed"]) > 3.0 and acc["draft-ids-not-read"] < 1.5
    tok = AutoTokenizer.from_pretrained(str(exported / "target"))
    assert tok.eos_token_id == STOP and tok.decode([0, 1, 2]) == "<bos> copy |"


def test_a_directory_in_use_is_refused_in_one_line_and_force_keeps_what_is_not_ours(tmp_path: Path) -> None:
    out = tmp_path / "pair"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = export(out, "--models-only")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "not empty" in r.stderr
    assert os.listdir(out) == ["notes.txt"]
    r = export(out, "--models-only", "--force")
    assert r.returncode == 0, r.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "target" / "model.safetensors").exists()


def test_each_trained_draft_comes_with_its_training_manifest(exported: Path) -> None:
    from eagle3_top.tracer.analysis.manifest import load_manifest

    for name, ids in (("draft", [-1, 2, 5]), ("draft-no-embed", [0, 2, 5])):
        m = load_manifest(str(exported / f"{name}.manifest.json"))
        assert m.layer_ids == ids and m.concat_order == ids and m.slot_width == 128
        assert m.training is not None and m.training.expected_accept_length is not None
