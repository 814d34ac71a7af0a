"""The wiring guard in the built-in engine: with a training manifest named to it, a mis-wired draft
stops the engine before it binds or serves anything (exit 78), with each finding and its fix on
stderr; warn mode logs and serves; the trained wiring serves; a manifest it cannot read is a refusal,
not a pass. The same guard inside SGLang: test_sglang_guard.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from patience import HANG_GUARD_S

if importlib.util.find_spec("torch") is None:
    pytest.skip("the built-in engine needs torch", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = str(ROOT / "examples" / "demo-manifest.json")  # the bundled draft's training, [-1, 2, 5]
WEIGHTS = ROOT / "hooks" / "toy" / "weights"
ENGINE = [sys.executable, "-m", "eagle3_top.hooks.toy_main", "--max-steps", "3"]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_TOP_GUARD")}
    full.update(env)
    return subprocess.run([*ENGINE, *args], capture_output=True, text=True, timeout=HANG_GUARD_S, env=full)


def test_a_mis_wired_draft_is_stopped_before_serving_with_the_fix() -> None:
    r = run("--speculative-draft-model-path", str(WEIGHTS / "draft-ids-not-read"), "--publish",
            "tcp://127.0.0.1:0", EAGLE3_TOP_GUARD_MANIFEST=MANIFEST)  # fmt: skip
    assert r.returncode == 78, r.stderr
    assert "publishing on" not in r.stderr and "verify steps" not in r.stderr  # nothing bound or run
    lines = r.stderr.splitlines()
    assert any(
        "LAYER_IDS_NOT_READ" in line
        and "fix: put eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 2, 5] in the draft's config.json"
        in line
        for line in lines
    )
    assert any("LAYER_MAP_MISMATCH: served layers [1, 3, 4]" in line for line in lines)
    assert "not serving" in lines[-1]


def test_warn_mode_logs_and_serves() -> None:
    r = run("--speculative-draft-model-path", str(WEIGHTS / "draft-ids-not-read"),
            "--guard-manifest", MANIFEST, EAGLE3_TOP_GUARD="warn")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "warning: eagle3-top guard: LAYER_IDS_NOT_READ" in r.stderr and "serving anyway" in r.stderr
    assert "3 verify steps" in r.stderr


def test_the_trained_wiring_serves() -> None:
    r = run("--guard-manifest", MANIFEST)
    assert r.returncode == 0, r.stderr
    assert "the wiring matches the training manifest" in r.stderr and "3 verify steps" in r.stderr


def test_a_guard_that_cannot_judge_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text("{not json")
    r = run("--guard-manifest", str(bad))
    assert r.returncode == 78 and "cannot read the training manifest" in r.stderr
    r = run("--guard-manifest", MANIFEST, EAGLE3_TOP_GUARD="maybe")
    assert r.returncode == 2 and "EAGLE3_TOP_GUARD='maybe': expected stop or warn" in r.stderr
