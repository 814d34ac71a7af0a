"""The engine seam (tracer/engines/): every registered engine implements the contract, knowledge is
asked of the engine a hello names, versions are parsed once and unknown ones refused, fix sentences
name ids the engine's own rules check, and the documented defect table is the observed one."""

from __future__ import annotations

from pathlib import Path

import pytest
from eagle3_top.tracer import engines
from eagle3_top.tracer.engines.base import Engine, fix_ids, ids_for, parse_version, version_problem
from eagle3_top.tracer.engines.sglang import ENGINE as SGLANG
from eagle3_top.tracer.engines.sglang import defects
from eagle3_top.tracer.engines.sglang.capture import DEEPSEEK, GPT_OSS, LLAMA, LLAMA_TAIL

ROOT = Path(__file__).resolve().parent.parent


def test_every_registered_engine_implements_the_contract() -> None:
    for name in engines.names():
        e = engines.engine(name)
        assert isinstance(e, Engine) and e.name == name, name
    assert engines.engine("a-server-we-do-not-know") is None and engines.engine(None) is None


@pytest.mark.parametrize(
    ("text", "version"),
    [("0.5.17", (0, 5, 17)), ("v0.5.22rc1", (0, 5, 22)), ("0.5.17.post1", (0, 5, 17)), ("0.32.0+cpu", (0, 32, 0)),
     ("banana", None), ("7", None), ("", None), (None, None), ("1" * 80, None)],
)  # fmt: skip
def test_one_version_parser(text: str | None, version: tuple[int, ...] | None) -> None:
    assert parse_version(text) == version


def test_a_release_outside_the_range_or_not_a_version_is_named() -> None:
    assert version_problem(SGLANG, "0.5.20") is None and version_problem(SGLANG, "0.5.23.post2") is None
    assert "outside the releases eagle3-top knows (0.5.17 – 0.5.23)" in str(version_problem(SGLANG, "0.4.0"))
    assert "is not a SGLang version" in str(version_problem(SGLANG, "banana"))
    assert version_problem(engines.engine("toy"), "anything") is None  # the built-in engine: any


@pytest.mark.parametrize(
    ("family", "canonical", "n", "ids"),
    [
        (LLAMA, [-1, 2, 5], 8, [-1, 2, 5]),  # SGLang's Llama rule: the canonical ids themselves
        (
            DEEPSEEK,
            [1, 29, 57],
            61,
            [1, 29, 57],
        ),  # first id 1: +1 (SpecForge's DeepSeek-V3 draft writes this)
        (DEEPSEEK, [0, 2, 4], 8, [3, 5, 1]),  # first id 1 would get +1: any other first id is kept
        (GPT_OSS, [1, 11, 21], 24, [1, 11, 21]),
        (LLAMA_TAIL, [0, 3, 7], 8, [0, 3, 7]),  # Gemma: the last block's output is reachable
        (LLAMA, [0, 3, 7], 8, None),  # Llama: it is not, whatever is written
    ],
)
def test_fix_sentences_name_ids_the_engines_own_rules_capture(
    family: str, canonical: list[int], n: int, ids: list[int] | None
) -> None:
    got = ids_for(SGLANG, family, canonical, n)
    assert got == ids
    if got is not None:
        assert SGLANG.capture(family, SGLANG.native_from_ids(family, got, n), n).canonical == canonical
        assert fix_ids(SGLANG, family, canonical, n) == (
            f"put eagle_config.eagle_aux_hidden_state_layer_ids = [{', '.join(map(str, got))}] in the draft's config.json"
        )
    else:
        assert "cannot capture canonical" in fix_ids(SGLANG, family, canonical, n)


def test_the_table_agrees_with_what_real_servers_showed() -> None:
    """The two defects first met on real 0.5.17 servers (an H200 and an H100), found again by the
    matrix from each release's own code: Llama crashes on the embedding slot until 0.5.22, Qwen2 holds
    another tensor in it until 0.5.21."""
    (llama,) = SGLANG.known_defects("0.5.17", "LlamaForCausalLM", [-1, 2, 5], 8)
    assert (llama.symptom, llama.case, llama.fixed_in) == ("crash", "embedding", (0, 5, 22))
    assert "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'" in llama.effect
    (qwen2,) = SGLANG.known_defects("0.5.20", "Qwen2ForCausalLM", [-1, 2, 5], 8)
    assert (qwen2.symptom, qwen2.fixed_in) == ("values", (0, 5, 21))
    assert SGLANG.known_defects("0.5.22", "LlamaForCausalLM", [-1, 2, 5], 8) == []
    assert SGLANG.known_defects("0.5.17", "LlamaForCausalLM", [0, 2, 5], 8) == []
    # a class that inherits its forward is observed for itself: Qwen3 aliases like Qwen2 did
    (qwen3,) = SGLANG.known_defects("0.5.19", "Qwen3ForCausalLM", [-1, 2, 5], 8)
    assert qwen3.symptom == "values"
    # and what it has not seen it says so, instead of calling it healthy
    assert "no observation of a MistralForCausalLM" in str(
        SGLANG.defects_coverage("0.5.23", "MistralForCausalLM")
    )


def test_the_docs_show_the_table_as_observed() -> None:
    doc = (ROOT / "docs" / "sglang-releases.md").read_text()
    block = doc.split("<!-- observed-defects:start -->\n", 1)[1].split("<!-- observed-defects:end -->", 1)[0]
    assert block == defects.markdown(), (
        "docs/sglang-releases.md is stale: paste defects.markdown() between the markers"
    )


ENGINE_PACKAGE = '''
"""A second engine, written as a new one would be: a folder and nothing of SGLang's package. It reads
the top-level ids first, then eagle_config's; id k captures the input of layer k (0 = the embedding
output, no +1); default (2, n//2, n-3); sorted and de-duplicated."""
from eagle3_top.tracer.engines.base import Capture, IdsAsRead, Outcome, SpecArgs, declared_ids, outcome_of


class Other:
    name = "other"
    title = "OtherServe"
    supported = ((1, 0), (1, 9))
    ids_key = "eagle_aux_hidden_state_layer_ids"
    ids_where = "in the draft's config.json"
    observer = None

    def read_ids(self, cfg):
        declared, where = declared_ids(cfg)
        top = cfg.get("eagle_aux_hidden_state_layer_ids")
        ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
        ids = top if isinstance(top, list) else ec.get("eagle_aux_hidden_state_layer_ids")
        return IdsAsRead(ids=list(ids) if isinstance(ids, list) else None, use_aux=True, declared=declared, declared_at=where)

    def family(self, arch, model=None):
        return "any"

    def convention(self, family):
        return "otherserve: native = id (input of layer id), canonical = id - 1, sorted, once"

    def default_native(self, family, num_layers):
        return [2, num_layers // 2, num_layers - 3]

    def native_from_ids(self, family, ids, num_layers):
        return self.default_native(family, num_layers) if ids is None else sorted(set(int(i) for i in ids))

    def capture(self, family, native, num_layers):
        got = sorted({int(i) for i in native if 0 <= int(i) < num_layers})
        return Capture(got, [i - 1 for i in got])

    def resolve_flags(self, requested, arch):
        steps = requested.num_steps or 3
        return SpecArgs(requested.algorithm, steps, 1, steps + 1), []

    def known_defects(self, version, arch, ids, num_layers):
        return []

    def defects_coverage(self, version, arch):
        return None

    def observed_outcome(self, row, baseline=None):
        return outcome_of(row, None)


ENGINE = Other()
'''


def test_a_new_engine_is_a_folder_and_one_registration(tmp_path, monkeypatch) -> None:
    """The findings, their fix sentences and preflight ask the engine the hello names: a draft trained
    in SpecForge's convention ([0, 2, 5]) served by an engine that does not add 1 lands one block early,
    and the fix names the ids that engine needs, checked by its own rules."""
    import json
    import sys

    from eagle3_top.tracer.analysis.diagnose import diagnose
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.analysis.manifest import Manifest
    from eagle3_top.tracer.analysis.preflight import predict
    from eagle3_top.tracer.engines.base import SpecArgs
    from eagle3_top.tracer.schema import HELLO, Event

    pkg = tmp_path / "otherserve_rules"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(ENGINE_PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(engines.REGISTRY, "other", "otherserve_rules")  # the one registration
    other = engines.engine("other")
    assert isinstance(other, Engine)

    target, draft = tmp_path / "target", tmp_path / "draft"
    for d, cfg in (
        (target, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8, "hidden_size": 64}),
        (draft, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}}),
    ):  # fmt: skip
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
    p = predict(str(target), str(draft), SpecArgs("EAGLE3", 3, 1, None), "1.2", engine_name="other")
    assert p.hello.engine == "other" and p.hello.aux is not None
    assert p.hello.aux.capture_canonical == [-1, 1, 4]  # one block early: this engine adds no 1
    manifest = Manifest.from_json(
        {"eagle3_top_manifest": 1, "aux": {"layer_ids": [0, 2, 5], "concat_order": [0, 2, 5], "slots": 3,
         "slot_width": 64}, "reference": {"fingerprint": {"rms": [1.0] * 3, "mean": [0.0] * 3}}},
        "m.json",
    )  # fmt: skip
    book = EvidenceBook(manifest=manifest)
    book.ingest([Event(HELLO, "x:1:r0", 0, 0.0, p.hello.to_body())], 0.0)
    (f,) = diagnose(book.sources["x:1:r0"], manifest)
    assert f.code == "LAYER_MAP_MISMATCH" and "served layers [-1, 1, 4]" in f.message
    assert f.fix.endswith("put eagle_aux_hidden_state_layer_ids = [1, 3, 6] in the draft's config.json")
    assert "otherserve_rules" in sys.modules and "OtherServe" not in str(SGLANG.title)


def test_one_defect_per_symptom_the_broadest_case_first() -> None:
    """Gemma 4 on 0.5.17 – 0.5.21 captures wrong values whatever the ids: the embedding case holds too,
    but one finding says it, and its fix is the upgrade (no choice of layers avoids it)."""
    from eagle3_top.tracer.analysis.diagnose import defect_fix
    from eagle3_top.tracer.schema import Hello, ModelInfo

    (d,) = SGLANG.known_defects("0.5.17", "Gemma4ForConditionalGeneration", [-1, 3, 5], 30)
    assert (d.case, d.symptom, d.fixed_in) == ("distinct", "values", (0, 5, 22))
    hello = Hello(
        engine="sglang", engine_version="0.5.17", model=ModelInfo(arch=d.architecture, num_layers=30)
    )
    assert (
        defect_fix(d, hello, [-1, 3, 5])
        == "upgrade SGLang to 0.5.22 or later (no choice of layers avoids it)"
    )
