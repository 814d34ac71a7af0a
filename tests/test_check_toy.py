"""`eagle3-top check` against the built-in engine, as a deploy pipeline runs it: real processes,
real sockets, only the command line. Each scenario is a mistake a user can make with a draft
directory or a flag."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("torch")

from eagle3_top.hooks.toy import paths  # noqa: E402
from patience import HANG_GUARD_S

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


class Engine:
    def __init__(self, *args: str) -> None:
        self.endpoint = free_endpoint()
        self.proc = subprocess.Popen(
            [*CLI, "toy", "--publish", self.endpoint, "--max-steps-per-s", "200", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip

    def stop(self) -> str:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err.decode(errors="replace")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("manifest")
    data = root / "hidden_states"
    subprocess.run(
        [*CLI, "toy", "gen-data", "--out", str(data), "--num-samples", "16"], check=True, capture_output=True
    )
    out = root / "m.json"
    subprocess.run(
        [*CLI, "manifest", "build", "--draft", paths.draft_dir(), "--data", str(data),
         "--target-config", paths.target_dir(), "--metrics", os.path.join(paths.draft_dir(), "training_metrics.json"),
         "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(out)


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    started: list[Engine] = []
    yield started
    for e in started:
        e.stop()


def check(endpoint: str, manifest: str | None, *extra: str) -> tuple[int, list[dict], str]:
    # a verdict comes once the evidence is in; the timeout only bounds a failure (a loaded box
    # may take minutes to start an engine, and a check that gave up first said "no hello")
    cmd = [*CLI, "check", endpoint, "--json", "--timeout", "600", *extra]
    if manifest:
        cmd += ["--manifest", manifest]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    findings = json.loads(r.stdout)["findings"] if r.stdout.strip().startswith("{") else []
    return r.returncode, findings, r.stderr


def _draft_variant(tmp_path, mutate) -> str:
    d = tmp_path / "draft"
    shutil.copytree(paths.draft_dir(), d)
    cfg = json.loads((d / "config.json").read_text())
    mutate(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_healthy_engine_passes(manifest, engines) -> None:
    engines.append(e := Engine())
    rc, findings, err = check(e.endpoint, manifest)
    assert (rc, findings) == (0, []), err


def test_motivating_bug_fails_within_50_steps(manifest, engines) -> None:
    engines.append(e := Engine("--speculative-draft-model-path", paths.draft_ids_not_read_dir()))
    rc, findings, err = check(e.endpoint, manifest, "--steps", "50")
    assert rc == 1, err
    codes = {f["code"] for f in findings}
    # one cause (the ids not read) and the map a user checks; the symptoms are inside the cause (no
    # AUX_STATS_DRIFT either: the slots drift because their layers are wrong)
    assert codes == {"LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH"}, findings
    cause = next(f for f in findings if f["code"] == "LAYER_IDS_NOT_READ")
    assert "ACCEPT_LENGTH_FAR_BELOW_EXPECTED" in {x["code"] for x in cause["evidence"]["explains"]}
    lm = next(f for f in findings if f["code"] == "LAYER_MAP_MISMATCH")
    assert "[1, 3, 4]" in lm["message"] and "[-1, 2, 5]" in lm["message"]
    assert all({"code", "severity", "message", "source", "fix"} <= f.keys() for f in findings)


def test_motivating_bug_fails_without_a_manifest(engines) -> None:
    # The draft directory's own training_metrics.json says what it reached; the hello carries it.
    engines.append(e := Engine("--speculative-draft-model-path", paths.draft_ids_not_read_dir()))
    rc, findings, err = check(e.endpoint, None, "--steps", "50")
    assert rc == 1, err
    # one cause, one finding: the ids the engine did not read, with the low accept length inside it
    assert [f["code"] for f in findings] == ["LAYER_IDS_NOT_READ"]
    (cause,) = findings
    low = next(x for x in cause["evidence"]["explains"] if x["code"] == "ACCEPT_LENGTH_FAR_BELOW_EXPECTED")
    assert low["evidence"]["measured"] < 1.5
    assert low["evidence"]["expected"] == pytest.approx(3.87, abs=0.01)
    assert "explains: accept length" in cause["message"]


def test_flag_rewrite_is_reported(engines) -> None:
    engines.append(e := Engine("--speculative-num-steps", "1", "--speculative-num-draft-tokens", "16"))
    rc, findings, _ = check(e.endpoint, None)
    assert rc == 1
    assert [f["code"] for f in findings] == ["SPEC_PARAM_REWRITTEN"]
    assert "16 → 2" in findings[0]["message"]


def test_eagle_algorithm_with_eagle3_draft(manifest, engines) -> None:
    engines.append(e := Engine("--speculative-algorithm", "EAGLE"))
    rc, findings, _ = check(e.endpoint, manifest)
    assert rc == 1
    assert [f["code"] for f in findings] == ["ALGORITHM_MISMATCH"], findings


def test_out_of_order_ids_reorder_slots(manifest, engines, tmp_path) -> None:
    draft = _draft_variant(
        tmp_path, lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[5, 2, -1])
    )
    # served ascending [-1, 2, 5]: what training used too (ascending) -> healthy; a list-order
    # manifest says training concatenated [5, 2, -1] -> LAYER_ORDER_MISMATCH
    m = json.loads(open(manifest).read())
    m["aux"].update(layer_ids=[5, 2, -1], concat_order=[5, 2, -1], concat_order_rule="list")
    m["reference"]["fingerprint"] = {
        k: (v[::-1] if isinstance(v, list) and len(v) == 3 else v)
        for k, v in m["reference"]["fingerprint"].items()
    }
    listed = tmp_path / "m_list.json"
    listed.write_text(json.dumps(m))
    engines.append(e := Engine("--speculative-draft-model-path", draft))
    rc, findings, _ = check(e.endpoint, str(listed))
    codes = {f["code"] for f in findings}
    assert rc == 1 and codes == {"LAYER_ORDER_MISMATCH"}, findings


def test_no_stream_is_exit_2(tmp_path) -> None:
    rc, _, err = check(free_endpoint(), None, "--timeout", "1.5")
    assert rc == 2 and "no hello" in err


def test_bad_manifest_is_exit_2(tmp_path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"eagle3_top_manifest": 7}))
    rc, _, err = check(free_endpoint(), str(bad))
    assert rc == 2 and "manifest version 7" in err


def test_duplicate_ids_collapse_a_slot(engines, tmp_path) -> None:
    # [2, 2, 5]: SGLang captures each layer once, so the draft's fc gets 2 slots where it wants 3
    draft = _draft_variant(
        tmp_path, lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 2, 5])
    )
    engines.append(e := Engine("--speculative-draft-model-path", draft))
    rc, findings, err = check(e.endpoint, None)
    assert rc == 1, err
    # the crash the width causes is named by it: one finding
    assert [f["code"] for f in findings] == ["AUX_WIDTH_MISMATCH"], (findings, err)
    (width,) = findings
    assert width["message"].startswith("the engine crashed (") and "because aux width 256" in width["message"]
    assert "384" in width["message"] and width["evidence"]["explains"][0]["code"] == "ENGINE_FAILED"


def test_uninitialised_vocab_map(engines, tmp_path) -> None:
    import torch

    draft = _draft_variant(tmp_path, lambda c: None)
    sd = torch.load(os.path.join(draft, "model.pt"), weights_only=True)
    key = next(k for k in sd if k.endswith("d2t"))
    sd[key] = torch.zeros_like(sd[key])  # arange-initialised hot-token map: draft id i -> target id i
    torch.save(sd, os.path.join(draft, "model.pt"))
    engines.append(e := Engine("--speculative-draft-model-path", draft))
    rc, findings, _ = check(e.endpoint, None)
    # without a manifest the map itself cannot be judged, but what it does to acceptance can be
    assert rc == 1 and [f["code"] for f in findings] == ["ACCEPT_LENGTH_FAR_BELOW_EXPECTED"]
    data = tmp_path / "hs"
    subprocess.run(
        [*CLI, "toy", "gen-data", "--out", str(data), "--num-samples", "4"], check=True, capture_output=True
    )
    m = tmp_path / "m.json"
    subprocess.run(
        [*CLI, "manifest", "build", "--draft", draft, "--data", str(data), "--out", str(m)],
        check=True,
        capture_output=True,
    )
    rc, findings, _ = check(e.endpoint, str(m))
    # with the manifest the cause is found, and the low acceptance is inside it
    assert rc == 1 and [f["code"] for f in findings] == ["VOCAB_MAP_INVALID"], findings
    assert "all offsets are zero" in findings[0]["message"]


def test_aux_switched_off_in_the_draft_config(manifest, engines, tmp_path) -> None:
    # eagle_config.use_aux_hidden_state: false: the server captures no layers and feeds the draft its
    # final hidden state, which the draft's fc (trained on 3 slots) never sees: it is skipped
    draft = _draft_variant(tmp_path, lambda c: c["eagle_config"].update(use_aux_hidden_state=False))
    engines.append(e := Engine("--speculative-draft-model-path", draft))
    rc, findings, err = check(e.endpoint, manifest, "--steps", "50")
    assert rc == 1, err
    assert [f["code"] for f in findings] == ["AUX_WIDTH_MISMATCH"], findings
    width = findings
    assert "use_aux_hidden_state is false" in width[0]["message"], findings
    assert "128 wide" in width[0]["message"] and "384" in width[0]["message"]
    assert "use_aux_hidden_state" in width[0]["fix"]
