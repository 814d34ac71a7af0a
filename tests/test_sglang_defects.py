"""The release defect table (tracer/engines/sglang/observed.json) held against the installed SGLang's
own code: every architecture with a published EAGLE-3 draft, every capture case, rerun here on the
CPU (hooks/sglang/observe/: the release's id reading, model registry, ``set_eagle3_layers_to_capture``
and decoder forward loop, its norms on their CUDA path). A release that no longer behaves as recorded
fails this test, naming the architecture, the case and what changed; then ``make sglang-matrix``
records the new behaviour. ``make test`` runs this file against SGLang 0.5.23 and 0.5.17, ``make
test-sglang-versions`` against every release between them."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

from eagle3_top.hooks.sglang.matrix import compact
from eagle3_top.tracer.engines.base import parse_version, version_text
from eagle3_top.tracer.engines.sglang import defects
from eagle3_top.tracer.engines.sglang.capture import captured_native, family_of
from patience import HANG_GUARD_S

ROOT = Path(__file__).resolve().parent.parent
VERSION = version_text((parse_version(importlib.metadata.version("sglang")) or (0,))[:3])


@pytest.fixture(scope="module")
def observed_now() -> list[dict[str, Any]]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-m", "eagle3_top.hooks.sglang.observe", "--matrix", "--config-dir",
         str(ROOT / "tests" / "data" / "published")],
        capture_output=True, text=True, env=env, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return str(row["architecture"]), str(row["case"])


def test_this_release_behaves_as_the_table_records(observed_now: list[dict[str, Any]]) -> None:
    recorded = {_key(r): r for r in defects.observed()["observations"] if r["sglang_version"] == VERSION}
    assert recorded, f"the table has no observations of SGLang {VERSION}: run make sglang-matrix"
    now = {_key(r): compact(r) for r in observed_now}
    assert set(now) == set(recorded), "architectures or cases changed: run make sglang-matrix"
    changed = [
        f"{arch} {case}: recorded {defects.outcome(recorded[(arch, case)])}, now {defects.outcome(now[(arch, case)])}"
        for arch, case in sorted(now)
        if now[(arch, case)] != recorded[(arch, case)]
    ]
    assert not changed, (
        f"SGLang {VERSION} no longer behaves as tracer/engines/sglang/observed.json says:\n"
        + "\n".join(changed)
    )


def test_our_capture_rules_predict_what_the_release_captures(observed_now: list[dict[str, Any]]) -> None:
    """Where the release produced slots, our rules (tracer/engines/sglang/capture.py) name the same
    layers in the same order as the stored capture list: every slot that holds another layer is a
    defect of the release (aliasing), never a rule of ours that is wrong."""
    for row in observed_now:
        if not isinstance(row.get("slots"), list):
            continue
        family = family_of(arch=row["architecture"])
        predicted = [i - 1 for i in captured_native(family, row["native"], row["num_layers"])]
        kind = defects.outcome(row).kind
        assert kind in ("clean", "values"), row  # never "rules": a disagreement is a bug of ours
        if kind == "clean":
            assert [s["holds"] for s in row["slots"]] == predicted, row


def test_every_release_is_recorded_for_every_architecture_and_case() -> None:
    rows = defects.observed()["observations"]
    by_release: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        by_release.setdefault(r["sglang_version"], set()).add(_key(r))
    from eagle3_top.tracer.engines.sglang.versions import RELEASES

    assert sorted(by_release) == sorted(RELEASES)
    full = set.union(*by_release.values())
    assert {case for _, case in full} == set(defects.CASES)
    for release, keys in by_release.items():
        assert keys == full, (release, sorted(full - keys))
