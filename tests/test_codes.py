"""The findings registry (tracer/analysis/codes.py): every code has its section in docs/findings.md and
every section a code; every code the analysis can raise is registered; and one cause, one finding:
explained symptoms fold into their cause as evidence, a harmless cause explains nothing, a symptom
without a cause stands alone."""

from __future__ import annotations

import re
from pathlib import Path

from eagle3_top.tracer.analysis.codes import CAUSE, CODES, REGISTRY, fold
from eagle3_top.tracer.analysis.findings import ERROR, INFO, WARNING, Finding
from eagle3_top.tracer.analysis.thresholds import Thresholds

ROOT = Path(__file__).resolve().parent.parent


def test_every_code_has_its_section_and_every_section_a_code() -> None:
    doc = (ROOT / "docs" / "findings.md").read_text()
    sections = set(re.findall(r"^## ([A-Z0-9_]+)$", doc, flags=re.M))
    assert sections == set(REGISTRY)


def test_every_code_the_analysis_raises_is_registered() -> None:
    raised: set[str] = set()
    for path in (ROOT / "tracer" / "analysis").glob("*.py"):
        if path.name == "codes.py":
            continue
        raised |= set(
            re.findall(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)",\s*(?:ERROR|WARNING|INFO)', path.read_text())
        )
        raised |= set(re.findall(r'Finding\(\s*"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"', path.read_text()))
    assert raised and raised <= set(REGISTRY), raised - set(REGISTRY)


def test_registry_is_consistent() -> None:
    fields = {f for f in Thresholds.__dataclass_fields__}
    for code in CODES:
        assert set(code.explains) <= set(REGISTRY), code
        assert set(code.thresholds) <= fields, code
        assert code.docs == f"docs/findings.md#{code.code.lower()}"
        if code.explains:
            assert code.kind == CAUSE or code.code in (
                "AUX_STATS_DRIFT",
                "PROBE_MISMATCH",
                "ACCEPT_LENGTH_FAR_BELOW_EXPECTED",
            )


def _f(code: str, severity: str = ERROR, source: str = "h:1:r0", **evidence: object) -> Finding:
    return Finding(code, severity, f"{code} message", f"{code} fix", source, dict(evidence))


def test_symptoms_fold_into_the_root_cause() -> None:
    found = fold(
        [
            _f("ACCEPT_LENGTH_FAR_BELOW_EXPECTED", brief="accept length 1.19 against 3.80 expected"),
            _f("LAYER_MAP_MISMATCH"),
            _f("ACCEPTANCE_BELOW_TRAINING", WARNING),
            _f("LAYER_IDS_NOT_READ"),
        ]
    )
    assert [f.code for f in found] == ["LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH"]
    root = found[0]
    assert [e["code"] for e in root.evidence["explains"]] == [
        "ACCEPT_LENGTH_FAR_BELOW_EXPECTED",
        "ACCEPTANCE_BELOW_TRAINING",
    ]
    assert "explains: accept length 1.19 against 3.80 expected" in root.message


def test_a_harmless_cause_explains_nothing_and_other_sources_stay_apart() -> None:
    found = fold([_f("LAYER_IDS_NOT_READ", INFO), _f("ACCEPT_LENGTH_FAR_BELOW_EXPECTED")])
    assert {f.code for f in found} == {"LAYER_IDS_NOT_READ", "ACCEPT_LENGTH_FAR_BELOW_EXPECTED"}
    found = fold([_f("LAYER_MAP_MISMATCH"), _f("ACCEPT_LENGTH_FAR_BELOW_EXPECTED", source="h:2:r0")])
    assert len(found) == 2


def test_a_crash_folds_only_into_a_cause_that_crashes() -> None:
    crash = _f("ENGINE_FAILED", engine_error="TypeError: unsupported operand")
    (f,) = fold([crash, _f("ENGINE_KNOWN_DEFECT", symptom="crash")])
    assert f.code == "ENGINE_KNOWN_DEFECT" and f.message.startswith("the engine crashed (TypeError")
    found = fold([crash, _f("ENGINE_KNOWN_DEFECT", symptom="values")])
    assert {x.code for x in found} == {"ENGINE_FAILED", "ENGINE_KNOWN_DEFECT"}
    # a width mismatch from another target's hidden size is its own cause, not the ids'
    found = fold([_f("LAYER_MAP_MISMATCH"), _f("AUX_WIDTH_MISMATCH", hidden=4096, trained_slot_width=128)])
    assert {x.code for x in found} == {"LAYER_MAP_MISMATCH", "AUX_WIDTH_MISMATCH"}
    (f,) = fold([_f("LAYER_MAP_MISMATCH"), _f("AUX_WIDTH_MISMATCH", slots=2, trained_slots=3)])
    assert f.code == "LAYER_MAP_MISMATCH"
