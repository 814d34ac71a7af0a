"""``eagle3-top preflight`` through the real command, on the built-in pair as ``toy export`` writes
it (what a user would point SGLang at): each mis-wiring is predicted with the code ``check`` gives a
live server, and the exit codes are ``check``'s. SGLang's own resolution is held against the
prediction in test_sglang_preflight.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from patience import HANG_GUARD_S

if importlib.util.find_spec("torch") is None:
    pytest.skip("toy export (the fixture) needs torch; preflight itself does not", allow_module_level=True)

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
CHAIN = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "examples" / "demo-manifest.json"  # the bundled draft's training, [-1, 2, 5]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("preflight") / "pair"
    r = subprocess.run([*CLI, "toy", "export", "--out", str(out), "--models-only"],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


def preflight(
    pair: Path, draft: str, *extra: str, json_out: bool = False, observe: bool = False
) -> subprocess.CompletedProcess[str]:
    """The command from the rules and the observed table (``observe``: with the installed release's
    own classes run, test_sglang_preflight.py)."""
    argv = [*CLI, "preflight", "--model-path", str(pair / "target"), "--speculative-draft-model-path",
            str(pair / draft), *extra, *(() if observe else ("--from-table",))]  # fmt: skip
    if json_out:
        argv.append("--json")
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD_S)


def verdict(pair: Path, draft: str, *extra: str) -> tuple[int, dict[str, Any]]:
    r = preflight(pair, draft, *extra, json_out=True)
    assert r.returncode in (0, 1), r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    assert out["exit_code"] == r.returncode
    return r.returncode, out


def codes(out: dict[str, Any]) -> set[str]:
    return {f["code"] for f in out["findings"]}


def test_the_healthy_pair_passes_and_says_what_the_server_will_capture(pair: Path) -> None:
    r = preflight(
        pair,
        "draft-no-embed",
        "--sglang-version",
        "0.5.17",
        *CHAIN,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SGLang 0.5.17 (--sglang-version); target LlamaForCausalLM (8 layers, hidden 128)" in r.stdout
    assert "ids read: [0, 2, 5] (eagle_config.eagle_aux_hidden_state_layer_ids)" in r.stdout
    assert "captured, in this order: native [1, 3, 6] = canonical [0, 2, 5]" in r.stdout
    assert (
        "aux width 384 (3 slots); the draft's fc expects 384 (fc.weight in the draft's safetensors)"
        in r.stdout
    )
    assert "flags: steps 3, topk 1, draft tokens 4; none rewritten" in r.stdout
    assert r.stdout.rstrip().endswith("preflight: pass (0 finding(s))")


def test_the_motivating_deploy_fails_with_the_codes_check_gives_a_live_server(pair: Path) -> None:
    code, out = verdict(pair, "draft-ids-not-read", "--manifest", str(MANIFEST), "--sglang-version", "0.5.23")
    assert code == 1 and out["verdict"] == "fail"
    assert codes(out) == {"LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH"}
    lm = next(f for f in out["findings"] if f["code"] == "LAYER_MAP_MISMATCH")
    assert "served layers [1, 3, 4] (canonical; engine-native [2, 4, 5]), trained [-1, 2, 5]" in lm["message"]
    assert out["hello"]["aux"]["ids_location"] == "top_level"
    # without a manifest the draft's own config contradicts the server: still a failure
    code, out = verdict(pair, "draft-ids-not-read", *CHAIN)
    assert code == 1 and codes(out) == {"LAYER_IDS_NOT_READ"}


def test_a_rewritten_flag_is_named_with_what_the_server_makes_of_it(pair: Path) -> None:
    code, out = verdict(
        pair, "draft-no-embed", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "16",
    )  # fmt: skip
    assert code == 1 and codes(out) == {"SPEC_PARAM_REWRITTEN"}
    (f,) = out["findings"]
    assert "num_draft_tokens 16 → 2" in f["message"]
    # no steps given: SGLang picks all three for a Llama target, and says so
    code, out = verdict(pair, "draft-no-embed", "--sglang-version", "0.5.23")
    assert out["hello"]["spec"]["effective"] == {
        "algorithm": "EAGLE3",
        "num_steps": 5,
        "topk": 4,
        "num_draft_tokens": 8,
    }


def test_the_releases_known_defect_is_predicted_and_the_fixing_release_passes(pair: Path) -> None:
    code, out = verdict(
        pair,
        "draft",
        "--sglang-version",
        "0.5.17",
        *CHAIN,
    )
    assert code == 1 and codes(out) == {"ENGINE_KNOWN_DEFECT"}
    (f,) = out["findings"]
    assert "fixed in 0.5.22" in f["message"] and "[0, 2, 5] instead of [-1, 2, 5]" in f["fix"]
    code, out = verdict(
        pair,
        "draft",
        "--sglang-version",
        "0.5.22",
        *CHAIN,
    )
    assert (code, codes(out)) == (0, set())


def test_a_slot_the_loop_never_reaches_is_a_width_mismatch(pair: Path, tmp_path: Path) -> None:
    bad = tmp_path / "unreachable"
    shutil.copytree(pair / "draft-no-embed", bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 2, 7]  # canonical n-1: never captured
    (bad / "config.json").write_text(json.dumps(cfg))
    code, out = verdict(pair, str(bad), *CHAIN)
    assert code == 1 and "AUX_WIDTH_MISMATCH" in codes(out)
    assert out["hello"]["aux"]["capture_canonical"] == [0, 2] and out["hello"]["aux"]["expected_width"] == 384


def test_preflight_imports_no_torch(pair: Path) -> None:
    body = (
        "import sys; sys.modules['torch'] = None\n"  # any import of torch now raises ImportError
        "from eagle3_top.tui.cli import main\n"
        f"sys.exit(main(['preflight', '--model-path', {str(pair / 'target')!r}, "
        f"'--speculative-draft-model-path', {str(pair / 'draft-no-embed')!r}, '--speculative-num-steps', '3', '--speculative-eagle-topk', '1']))"
    )
    r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("missing", "no config.json (is it a model directory?)"),
        ("garbage", "--model-path config is not valid JSON"),
        ("list", "--model-path config must be a JSON object"),
        ("header", "unreadable safetensors header"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(pair: Path, tmp_path: Path, damage: str, said: str) -> None:
    target = tmp_path / "target"
    shutil.copytree(pair / "target", target)
    draft = tmp_path / "draft"
    shutil.copytree(pair / "draft-no-embed", draft)
    if damage == "missing":
        (target / "config.json").unlink()
    elif damage == "garbage":
        (target / "config.json").write_text("{not json")
    elif damage == "list":
        (target / "config.json").write_text("[1, 2]")
    else:
        (draft / "model.safetensors").write_bytes((40).to_bytes(8, "little") + b"{truncated")
    r = subprocess.run(
        [*CLI, "preflight", "--model-path", str(target), "--speculative-draft-model-path", str(draft)],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("eagle3-top preflight: ") and said in r.stderr


@pytest.mark.parametrize(
    ("which", "edit", "said"),
    [
        ("target", {"num_hidden_layers": "8"}, 'num_hidden_layers is a string "8", not a whole number'),
        (
            "target",
            {"num_hidden_layers": None},
            "no num_hidden_layers (the engine cannot build the model without it)",
        ),
        (
            "target",
            {"num_hidden_layers": 2**63 - 1},
            "num_hidden_layers = 9223372036854775807 is outside 1 – 4096",
        ),
        ("target", {"hidden_size": 1e308}, "hidden_size is a number 1e+308, not a whole number"),
        ("target", {"architectures": 5}, "architectures is a number 5, not a list of class names"),
        ("draft", {"eagle_config": "nested"}, 'eagle_config is a string "nested", not an object'),
        (
            "draft",
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["a", None]}},
            'eagle_config.eagle_aux_hidden_state_layer_ids holds a string "a", not a layer number',
        ),
        (
            "draft",
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": list(range(2000))}},
            "holds 2000 ids, more than any target has layers",
        ),
        ("draft", {"draft_vocab_size": float("nan")}, "draft_vocab_size is NaN, not a whole number"),
    ],
)
def test_configs_are_read_as_the_engine_reads_them_and_refused_in_one_line(
    pair: Path, tmp_path: Path, which: str, edit: dict[str, Any], said: str
) -> None:
    """What SGLang would refuse at start-up, or read as something the file does not say: exit 2, one
    line naming the file and the field; never a traceback, a made-up width or a pass."""
    target, draft = tmp_path / "target", tmp_path / "draft"
    shutil.copytree(pair / "target", target)
    shutil.copytree(pair / "draft-no-embed", draft)
    path = (target if which == "target" else draft) / "config.json"
    cfg = json.loads(path.read_text())
    for k, v in edit.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg))
    r = subprocess.run(
        [*CLI, "preflight", "--model-path", str(target), "--speculative-draft-model-path", str(draft), *CHAIN],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and str(path) in r.stderr and said in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("0.4.0", "SGLang 0.4.0 is outside the releases eagle3-top knows (0.5.17 – 0.5.23)"),
        ("0.6.1", "SGLang 0.6.1 is outside the releases eagle3-top knows"),
        ("banana", "'banana' is not a SGLang version"),
    ],
)
def test_a_release_it_does_not_know_is_refused_not_judged(pair: Path, version: str, said: str) -> None:
    r = preflight(pair, "draft-no-embed", "--sglang-version", version, *CHAIN)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr


def test_flags_sglang_refuses_to_start_with_are_refused_in_one_line(pair: Path) -> None:
    r = preflight(pair, "draft-no-embed", "--speculative-num-steps", "3")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert "without --speculative-eagle-topk: SGLang fails at start-up" in r.stderr


def test_any_falsy_use_aux_hidden_state_turns_capture_off_as_sglang_reads_it(
    pair: Path, tmp_path: Path
) -> None:
    """SGLang tests the value for truth: ``0`` or ``null`` switch the aux capture off like ``false``."""
    for value in (False, 0, None):
        off = tmp_path / f"off-{value}"
        shutil.copytree(pair / "draft-no-embed", off)
        cfg = json.loads((off / "config.json").read_text())
        cfg["eagle_config"]["use_aux_hidden_state"] = value
        (off / "config.json").write_text(json.dumps(cfg))
        code, out = verdict(pair, str(off), *CHAIN)
        assert code == 1 and codes(out) == {"AUX_WIDTH_MISMATCH"}, value
        assert out["hello"]["aux"]["capture_canonical"] == [], value
