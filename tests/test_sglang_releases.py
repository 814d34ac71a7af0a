"""The table of SGLang's known defects (tracer/sglang_releases.py) held against the installed
release's own model code: how its Llama and Qwen2 targets capture an aux slot at layer 0 (the
embedding slot). Read from the source with ``ast`` (no GPU, no import of the model); ``make test``
runs this file against SGLang 0.5.23 and 0.5.17."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip("sglang not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

from eagle3_top.tracer.sglang_releases import EMBEDDING, known_defects

VERSION = importlib.metadata.version("sglang")
MODELS = {"LlamaForCausalLM": ("llama.py", "LlamaModel"), "Qwen2ForCausalLM": ("qwen2.py", "Qwen2Model")}


def _forward(file: str, cls: str) -> ast.FunctionDef:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    path = os.path.join(next(iter(spec.submodule_search_locations)), "srt", "models", file)
    tree = ast.parse(open(path).read())
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")


def capture_at_layer_0(arch: str) -> str:
    """What the release's forward appends for a slot captured at layer 0, where no residual exists
    yet: "crash" (``hidden_states + residual`` with ``residual = None``), "alias" (the embedding
    tensor itself, which later in-place norms update), or "other" (a sum or copy, or no append)."""
    fwd = _forward(*MODELS[arch])
    appended = [
        c.args[0]
        for c in ast.walk(fwd)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and c.func.attr == "append"
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id == "aux_hidden_states"
    ]
    residual_none = any(
        isinstance(a, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "residual" for t in a.targets)
        and isinstance(a.value, ast.Constant)
        and a.value.value is None
        for a in ast.walk(fwd)
    )
    for arg in appended:
        if isinstance(arg, ast.BinOp) and residual_none:
            return "crash"
        if (
            isinstance(arg, ast.IfExp)
            and isinstance(arg.orelse, ast.Name)
            and arg.orelse.id == "hidden_states"
        ):
            return "alias"
    return "other"


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_the_table_says_what_this_releases_code_does_with_the_embedding_slot(arch: str) -> None:
    symptom = {"crash": "crash", "alias": "values", "other": None}[capture_at_layer_0(arch)]
    found = known_defects("sglang", VERSION, arch, [EMBEDDING, 2, 5])
    assert [d.symptom for d in found] == ([symptom] if symptom else []), (VERSION, arch)
    # and no defect without the embedding slot
    assert known_defects("sglang", VERSION, arch, [0, 2, 5]) == []


def test_the_release_under_test_is_one_the_table_covers() -> None:
    v = tuple(int(p) for p in VERSION.split(".")[:3])
    assert (0, 5, 17) <= v <= (0, 5, 23)
