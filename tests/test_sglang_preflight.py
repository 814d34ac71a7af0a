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
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return str(out)


def run_preflight(pair: str, draft: str, spec: dict[str, int]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "eagle3_top.tui.cli", "preflight", "--json", "--model-path",
            os.path.join(pair, "target"), "--speculative-draft-model-path", os.path.join(pair, draft)]  # fmt: skip
    for k, v in spec.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


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
        assert out["sglang_version"] == importlib.metadata.version("sglang")
        eff = out["hello"]["spec"]["effective"]
        assert [eff["num_steps"], eff["topk"], eff["num_draft_tokens"]] == got["flags"], (draft, spec)
        assert out["hello"]["aux"]["capture_native"] == got["capture"], (draft, spec)
    # what SGLang refuses to start with, preflight refuses with one line and exit 2
    for spec, why in zip(REFUSED, real["refused"], strict=True):
        assert why is not None, spec
        r = run_preflight(exported, "draft-no-embed", spec)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "SGLang" in r.stderr, (spec, r.stderr)
