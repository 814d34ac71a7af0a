"""Preflight on every published EAGLE-3 pair (tests/data/published: the targets' and drafts' own
configs) against what the installed SGLang's own classes do with them, on CPU: the ids the release
reads, the layers it captures, and, where a slot holds another layer or the release fails, the
defect table's entry that says so before the server is run. ``make test`` runs this file against
SGLang 0.5.23 and 0.5.17. (A module of its own so that it runs beside test_sglang_preflight.py.)"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402

VERSION = importlib.metadata.version("sglang")

PUBLISHED = [
    ("llama3.1-Meta-Llama-3.1-8B-target.json", "llama3.1-Llama-3.1-8B-Instruct-specforge-draft.json"),
    ("llama3.1-Meta-Llama-3.1-70B-target.json", "llama3.3-Llama-3.3-70B-Instruct-specforge-draft.json"),
    ("llama4-Llama-4-Scout-17B-16E-Instruct-target.json", "llama4-Llama-4-Scout-17B-16E-Instruct-specforge-draft.json"),
    ("qwen2.5-Qwen2.5-7B-target.json", "qwen2.5-Qwen2.5-7B-Instruct-specforge-draft.json"),
    ("qwen3-Qwen3-8B-target.json", "qwen3-Qwen3-8B-specforge-draft.json"),
    ("qwen3-Qwen3-32B-target.json", "qwen3-Qwen3-32B-specforge-draft.json"),
    ("qwen3moe-Qwen3-30B-A3B-target.json", "qwen3moe-Qwen3-30B-A3B-Instruct-2507-specforge-draft.json"),
    ("qwen3moe-Qwen3-235B-A22B-target.json", "qwen3moe-Qwen3-235B-A22B-Instruct-2507-specforge-draft.json"),
    ("qwen3moe-Qwen3-Coder-480B-A35B-Instruct-target.json", "qwen3moe-Qwen3-Coder-480B-A35B-Instruct-specforge-draft.json"),
    ("qwen3next-Qwen3-Next-80B-A3B-Thinking-target.json", "qwen3next-Qwen3-Next-80B-A3B-Instruct-specforge-draft.json"),
    ("gptoss-gpt-oss-20b-target.json", "gptoss-gpt-oss-20b-specforge-draft.json"),
    ("gptoss-gpt-oss-120b-target.json", "gptoss-gpt-oss-120b-specforge-draft.json"),
    ("deepseekv3-DeepSeek-V3-target.json", "deepseekv3-DeepSeek-V3-specforge-draft.json"),
    ("kimik2-Kimi-K2-Instruct-target.json", "kimik2-Kimi-K2-Instruct-AQ-MedAI-draft.json"),
    ("kimik25-Kimi-K2.5-target.json", "kimik25-Kimi-K2.5-AQ-MedAI-draft.json"),
    ("kimik25-Kimi-K2.5-target.json", "kimik25-Kimi-K2.5-specforge-draft.json"),
    ("gemma4-gemma-4-26B-A4B-target.json", "gemma4-gemma-4-26B-A4B-specforge-draft.json"),
    ("qwen3.5moe-Qwen3.5-35B-A3B-target.json", "qwen3.5moe-Qwen3.5-35B-A3B-specforge-draft.json"),
]  # fmt: skip
PUBLISHED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "published")


def child_published() -> list[dict[str, Any]]:
    """Each pair observed with the installed release's classes (the ids as the draft writes them,
    the target at its own depth), in one interpreter."""
    from eagle3_top.hooks.sglang.observe import GIVEN, observe

    rows = []
    for target, draft in PUBLISHED:
        with open(os.path.join(PUBLISHED_DIR, target)) as f:
            tcfg = json.load(f)
        with open(os.path.join(PUBLISHED_DIR, draft)) as f:
            dcfg = json.load(f)
        got = {r["case"]: r for r in observe(tcfg, dcfg, cases=(GIVEN, "distinct"), progress=None)}
        rows.append({"pair": [target, draft], "given": got[GIVEN], "distinct": got["distinct"]})
    return rows


def _model_dir(root: str, name: str, source: str) -> str:
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(PUBLISHED_DIR, source)) as f, open(os.path.join(d, "config.json"), "w") as g:
        g.write(f.read())
    return d


def test_preflight_on_published_pairs_agrees_with_what_the_release_does(tmp_path: Any) -> None:
    from eagle3_top.tracer.analysis.preflight import predict
    from eagle3_top.tracer.engines.base import SpecArgs
    from eagle3_top.tracer.engines.sglang import ENGINE

    observed = sglang_cpu.run_child("test_sglang_published", "child_published")
    for row in observed:
        target, draft = row["pair"]
        t = _model_dir(str(tmp_path), target, target)
        d = _model_dir(str(tmp_path), draft, draft)
        p = predict(t, d, SpecArgs("EAGLE3", 3, 1, None), VERSION)
        aux = p.hello.aux
        assert aux is not None
        given = row["given"]
        outcome = ENGINE.observed_outcome(given, row["distinct"])
        assert outcome.kind != "unobserved", (row["pair"], outcome)
        # the ids the release read and the capture list it set are the ones predicted ...
        assert (aux.ids_read, aux.capture_native) == (given["ids_read"], given["native"]), row["pair"]
        defects = ENGINE.known_defects(VERSION, p.hello.model.arch, aux.ids_read, p.hello.model.num_layers)
        if outcome.kind == "clean":
            # ... each slot holds the layer the rules say it captures, and no defect is predicted
            assert [s["holds"] for s in given["slots"]] == aux.capture_canonical, row["pair"]
            assert defects == [], row["pair"]
        else:  # ... or the release fails on it, and the table says so before it is run
            assert outcome.kind in {d.symptom for d in defects}, (row["pair"], outcome)
