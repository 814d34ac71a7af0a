"""What a draft directory claims about itself reaches the hello, and a hostile claim is no claim."""

from __future__ import annotations

import json

import pytest
from eagle3_top.hooks.toy import paths
from eagle3_top.tracer.engines.base import declared_ids as draft_layer_ids
from eagle3_top.tracer.serving.claims import draft_claims
from eagle3_top.tracer.serving.wiring import draft_config_as_written
from patience import HANG_GUARD_S


def test_the_built_in_drafts_claim_what_training_reached() -> None:
    for d in (paths.draft_dir(), paths.draft_ids_not_read_dir()):
        c = draft_claims(d)
        assert c is not None and c.source == "training_metrics.json"
        assert c.acc is not None and len(c.acc) == 3 and all(0.97 < a < 0.99 for a in c.acc)
        assert c.expected_accept_length == pytest.approx(3.87, abs=0.01)


@pytest.mark.parametrize(
    "content",
    [
        '{"acc": [0.9, "x"]}',
        '{"acc": [0.9, NaN]}',
        '{"simulated_acc_len": 1e400}',
        "[" * 100_000,
        '{"acc": ' + json.dumps([0.5] * 5000) + "}",
        "\xff\xfe not json",
        '{"unrelated": 1}',
    ],
)
def test_a_hostile_or_empty_claim_is_no_claim(tmp_path, content: str) -> None:
    (tmp_path / "training_metrics.json").write_text(content, encoding="latin-1")
    assert draft_claims(str(tmp_path)) is None


def test_a_hostile_draft_config_is_read_without_raising(tmp_path) -> None:
    # inside the serving process: a config must never take the hello (or the server) down
    (tmp_path / "config.json").write_text(
        json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["2", 1.5]},
                    "eagle_aux_hidden_state_layer_ids": [1, 2, 3], "architectures": {"a": 1}})
    )  # fmt: skip
    cfg = draft_config_as_written(str(tmp_path))
    assert draft_layer_ids(cfg) == ([1, 2, 3], "top_level")
    (tmp_path / "config.json").write_text("[" * 100_000)
    assert draft_config_as_written(str(tmp_path)) == {}


def test_the_built_in_engine_names_a_hostile_draft_config_in_one_line(tmp_path) -> None:
    import shutil
    import subprocess
    import sys

    pytest.importorskip("torch")
    d = tmp_path / "draft"
    shutil.copytree(paths.draft_dir(), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_size"] = "128"
    (d / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run(
        [sys.executable, "-m", "eagle3_top.hooks.toy_main", "--speculative-draft-model-path", str(d), "--max-steps", "1"],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "cannot build the engine from" in r.stderr and str(d) in r.stderr
