"""Preflight's prediction against SGLang itself, on CPU: for the built-in pair as ``toy export``
writes it and several flag sets, the flags SGLang's own argument resolution ends with and the layers
its real target is told to capture must be what ``preflight`` predicted. ``make test`` runs this
file against SGLang 0.5.23 and 0.5.17."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
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
from sglang_objects import server_args, sglang_effective, sglang_models  # noqa: E402

CHAIN = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
CASES: list[tuple[str, dict[str, int]]] = [
    ("draft-no-embed", CHAIN),
    (
        "draft-no-embed",
        {"speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 16},
    ),
    (
        "draft-no-embed",
        {"speculative_num_steps": 3, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8},
    ),
    ("draft-no-embed", {}),  # SGLang auto-chooses all three
    ("draft-no-embed-ids-not-read", CHAIN),
    ("draft", CHAIN),
]
# Flags SGLang refuses at start-up: preflight must refuse them too (exit 2, one line).
REFUSED: list[dict[str, int]] = [
    {"speculative_num_steps": 3},  # no topk: SGLang compares None with 1
    {"speculative_eagle_topk": 1},  # topk without steps: SGLang's bare AssertionError
]
FIELDS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

# -- child side (runs with the stand-ins installed) --------------------------------------------------


def child_sglang() -> dict[str, Any]:
    sglang_cpu.init_process_group()
    out = os.environ["E3T_EXPORT_DIR"]
    got = []
    for draft, spec in CASES:
        tdir, ddir = os.path.join(out, "target"), os.path.join(out, draft)
        sa = server_args(tdir, ddir, **spec)
        _, target, _, _, _ = sglang_models(sa, ddir)
        got.append(
            {
                "flags": [sglang_effective(sa, f) for f in FIELDS],
                "capture": list(target.model.layers_to_capture),
            }
        )
    refused = []
    for spec in REFUSED:
        try:
            server_args(os.path.join(out, "target"), os.path.join(out, "draft-no-embed"), **spec)
            refused.append(None)
        except (TypeError, AssertionError, ValueError) as exc:
            refused.append(f"{type(exc).__name__}: {exc}")
    return {"cases": got, "refused": refused}


# -- test side ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("export") / "pair"
    cmd = [sys.executable, "-m", "eagle3_top.tui.cli", "toy", "export", "--out", str(out), "--models-only"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr
    return str(out)


def run_preflight(
    pair: str, draft: str, spec: dict[str, int], target: str = "target", observe: bool = False
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "eagle3_top.tui.cli", "preflight", "--json", "--model-path",
            os.path.join(pair, target), "--speculative-draft-model-path", os.path.join(pair, draft),
            *(() if observe else ("--from-table",))]  # fmt: skip
    for k, v in spec.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD_S)


def predicted(pair: str, draft: str, spec: dict[str, int]) -> dict[str, Any]:
    r = run_preflight(pair, draft, spec)
    assert r.returncode in (0, 1), r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_preflight_predicts_what_sglang_resolves_and_captures(exported: str) -> None:
    real = sglang_cpu.run_child("test_sglang_preflight", "child_sglang", env={"E3T_EXPORT_DIR": exported})
    for (draft, spec), got in zip(CASES, real["cases"], strict=True):
        out = predicted(exported, draft, spec)
        # by default preflight applies the installed release's rules: the one under test here
        assert out["engine_version"] == importlib.metadata.version("sglang")
        eff = out["hello"]["spec"]["effective"]
        assert [eff["num_steps"], eff["topk"], eff["num_draft_tokens"]] == got["flags"], (draft, spec)
        assert out["hello"]["aux"]["capture_native"] == got["capture"], (draft, spec)
    # what SGLang refuses to start with, preflight refuses with one line and exit 2
    for spec, why in zip(REFUSED, real["refused"], strict=True):
        assert why is not None, spec
        r = run_preflight(exported, "draft-no-embed", spec)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "SGLang" in r.stderr, (spec, r.stderr)


VERSION = importlib.metadata.version("sglang")


@pytest.mark.parametrize(
    ("target", "symptom_before_fix", "fixed"),
    [("target-qwen2", "values", (0, 5, 21)), ("target", "crash", (0, 5, 22))],
)
def test_preflight_runs_the_installed_releases_classes_and_says_what_they_did(
    exported: str, target: str, symptom_before_fix: str, fixed: tuple[int, ...]
) -> None:
    """The draft reads the embedding slot. Where the release is installed, preflight runs its own
    target class at the target's depth on the CPU: before the fix the slot is changed after capture
    (Qwen2) or the forward crashes (Llama), from the release's own code; after it, every slot holds
    the layer it was captured at."""
    r = run_preflight(exported, "draft", CHAIN, target=target, observe=True)
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert out["engine_version"] == VERSION and out["observed"] is not None
    assert "running SGLang" in r.stderr and "own classes" in r.stderr  # progress on stderr
    note = next(n for n in out["notes"] if n.startswith("observed: "))
    assert f"SGLang {VERSION}'s own sglang.srt.models." in note
    broken = tuple(int(p) for p in VERSION.split(".")[:3]) < fixed
    if broken:
        assert out["observed"]["outcome"] == symptom_before_fix
        assert r.returncode == 1 and {f["code"] for f in out["findings"]} == {"ENGINE_KNOWN_DEFECT"}
        assert out["findings"][0]["evidence"]["symptom"] == symptom_before_fix
    else:
        assert out["observed"]["outcome"] == "clean"
        assert "its slots hold canonical [-1, 2, 5], each the layer it was captured at" in note
        assert r.returncode == 0 and out["findings"] == []


# Published EAGLE-3 drafts with their real targets (tests/data/published/SOURCES.md says where each
# came from): the prediction from the rules and the table against what the installed release's own
# classes do with them, at the target's real depth.
MISTRAL = {  # Mistral-7B-v0.3's shape; SGLang's MistralForCausalLM subclasses its Llama class
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 32768, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "sliding_window": None, "head_dim": 128, "hidden_act": "silu", "tie_word_embeddings": False,
}  # fmt: skip


def test_a_target_the_table_has_not_seen_is_run_not_passed(tmp_path: Any) -> None:
    """A class that inherits a defective forward from another is exactly what a table keyed by class
    name misses. From the table alone preflight says it has not seen the architecture (info, never a
    clean bill); with the release installed it runs the class and names what it does."""
    t, d = tmp_path / "mistral", tmp_path / "draft"
    t.mkdir()
    d.mkdir()
    (t / "config.json").write_text(json.dumps(MISTRAL))
    draft = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 32768, "draft_vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05,
             "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 15, 28]}}  # fmt: skip
    (d / "config.json").write_text(json.dumps(draft))
    argv = [sys.executable, "-m", "eagle3_top.tui.cli", "preflight", "--json", "--model-path", str(t),
            "--speculative-draft-model-path", str(d), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]  # fmt: skip
    r = subprocess.run([*argv, "--from-table"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and [f["code"] for f in out["findings"]] == ["ENGINE_DEFECTS_UNKNOWN"]
    assert out["findings"][0]["severity"] == "info"
    r = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD_S)
    out = json.loads(r.stdout)
    assert out["observed"] is not None, (out["notes"], r.stderr[-2000:])
    if tuple(int(p) for p in VERSION.split(".")[:3]) < (0, 5, 22):  # Llama's embedding-slot crash
        assert r.returncode == 1 and out["observed"]["outcome"] == "crash"
        (f,) = out["findings"]
        assert f["code"] == "ENGINE_KNOWN_DEFECT" and "'Tensor' and 'NoneType'" in f["message"]
    else:
        assert r.returncode == 0 and out["observed"]["outcome"] == "clean" and out["findings"] == []
