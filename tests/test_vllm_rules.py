"""vLLM's rules on the engine seam (``tracer/engines/vllm``): where it reads the ids, how it captures
them, what it does with the flags, and the findings and fixes they give, for the drafts ``toy
export`` writes. No vLLM needed: tests/test_vllm_server.py holds the same rules against a real vLLM
server (its log, its hello, its crash)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from eagle3_top.tracer import engines
from eagle3_top.tracer.analysis.diagnose import diagnose
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.engines.base import Engine, SpecArgs, fix_ids
from eagle3_top.tracer.schema import HELLO, Event, Hello, ModelInfo, SpecConfig, step_view

VLLM = engines.engine("vllm")
SGLANG = engines.engine("sglang")
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
TOP = "eagle_aux_hidden_state_layer_ids"


def nested(ids: list[int]) -> dict[str, Any]:
    return {"eagle_config": {TOP: ids}}


def test_vllm_is_one_registration_on_the_seam() -> None:
    assert isinstance(VLLM, Engine) and VLLM.name == "vllm" and "vllm" in engines.names()


@pytest.mark.parametrize(
    ("cfg", "ids", "where"),
    [
        ({TOP: [1, 3, 6], **nested([0, 2, 5])}, [1, 3, 6], "top_level"),  # the top level first
        (nested([0, 2, 5]), [0, 2, 5], "eagle_config"),
        ({TOP: [], **nested([0, 2, 5])}, [0, 2, 5], "eagle_config"),  # an empty list is not read
        ({TOP: ["1", 3]}, None, "missing"),
        ({}, None, "missing"),
    ],
)
def test_vllm_reads_the_top_level_first_then_eagle_config(cfg: dict[str, Any], ids: Any, where: str) -> None:
    got = VLLM.read_ids(cfg)
    assert (got.ids, got.declared_at) == (ids, where)


def test_sglang_never_reads_the_top_level() -> None:
    got = SGLANG.read_ids({TOP: [1, 3, 6], **nested([0, 2, 5])})
    assert (got.ids, got.declared_at) == ([0, 2, 5], "eagle_config")


def served(engine: Any, ids: list[int] | None, n: int = 8) -> Any:
    fam = engine.family("LlamaForCausalLM")
    return engine.capture(fam, engine.native_from_ids(fam, ids, n), n)


def test_vllm_adds_no_one_sorts_dedupes_and_never_reaches_minus_one() -> None:
    assert served(VLLM, [0, 2, 5]).canonical == [-1, 1, 4]  # SGLang-convention ids: one block early
    assert served(SGLANG, [0, 2, 5]).canonical == [0, 2, 5]
    assert served(VLLM, [1, 3, 6]).canonical == [0, 2, 5]
    assert served(VLLM, [6, 1, 3]).canonical == [0, 2, 5]  # sorted: the trained order is lost
    assert served(VLLM, [3, 3, 6]).native == [3, 6]
    assert served(VLLM, [0, 4, 8]).canonical == [-1, 3, 7]  # 0 the embedding, n the last block's output
    assert served(VLLM, None).canonical == served(SGLANG, None).canonical == [1, 3, 4]  # the same default
    crash = served(VLLM, [-1, 2, 5])
    assert crash.canonical == [1, 4] and crash.failure is not None
    assert "never reaches id -1" in crash.failure and "fails at the first request" in crash.failure


def test_the_fix_names_the_ids_and_the_place_for_the_engine_at_hand() -> None:
    assert fix_ids(VLLM, "vllm", [0, 2, 5], 8) == (
        "put eagle_aux_hidden_state_layer_ids = [1, 3, 6] at the top level of the draft's config.json "
        "(vLLM reads it there before eagle_config; SGLang never reads it there)"
    )
    assert fix_ids(VLLM, "vllm", [-1, 2, 5], 8).startswith(
        "put eagle_aux_hidden_state_layer_ids = [0, 3, 6] at the top"
    )
    assert "cannot capture canonical [5, 0, 3] in that order" in fix_ids(VLLM, "vllm", [5, 0, 3], 8)
    assert fix_ids(SGLANG, "llama", [0, 2, 5], 8) == (
        "put eagle_config.eagle_aux_hidden_state_layer_ids = [0, 2, 5] in the draft's config.json"
    )


def test_vllm_drafts_a_chain_and_says_so_when_asked_otherwise() -> None:
    eff, rewrites = VLLM.resolve_flags(SpecArgs("EAGLE3", 3, 4, 16), "LlamaForCausalLM")
    assert (eff.num_steps, eff.topk, eff.num_draft_tokens) == (3, 1, 4)
    assert [r["param"] for r in rewrites] == ["topk", "num_draft_tokens"]
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        VLLM.resolve_flags(SpecArgs("EAGLE3", None, None, None), None)


MANIFEST = {
    "eagle3_top_manifest": 1,
    "aux": {"layer_ids": [0, 2, 5], "concat_order": [0, 2, 5], "slots": 3, "slot_width": 128},
    "reference": {"fingerprint": {"rms": [1.0] * 3, "mean": [0.0] * 3}},
}


def findings_for(hello: Hello, with_manifest: bool = True) -> list[Any]:
    manifest = Manifest.from_json(MANIFEST, "m.json") if with_manifest else None
    book = EvidenceBook(manifest=manifest)
    book.ingest([Event(HELLO, "x:1:r0", 0, 0.0, hello.to_body())], 0.0)
    return diagnose(book.sources["x:1:r0"], manifest)


def test_another_speculative_method_is_not_judged_as_eagle3() -> None:
    hello = Hello(
        engine="vllm",
        engine_version="0.32.0",
        model=ModelInfo(arch="LlamaForCausalLM", num_layers=8, hidden_size=128),
        effective=SpecConfig("NGRAM", 3, 1, 4),
    )
    (alone,) = findings_for(hello, with_manifest=False)
    assert (alone.code, alone.severity) == ("SPECULATION_NOT_EAGLE3", "info")
    assert "speculates with method NGRAM" in alone.message
    (f,) = findings_for(hello)  # the manifest's draft is not served at all: no layer findings
    assert (f.code, f.severity) == ("SPECULATION_NOT_EAGLE3", "error") and '"method": "eagle3"' in f.fix


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="toy export needs torch")
    out = tmp_path_factory.mktemp("vllm-rules") / "pair"
    r = subprocess.run(
        [*CLI, "toy", "export", "--out", str(out), "--models-only"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    (out / "m.json").write_text(json.dumps(MANIFEST))
    return out


def preflight(pair: Path, draft: str, *extra: str) -> tuple[int, dict[str, Any]]:
    spec = json.dumps({"method": "eagle3", "model": str(pair / draft), "num_speculative_tokens": 3})
    r = subprocess.run(
        [*CLI, "preflight", "--model", str(pair / "target"), "--speculative-config", spec, "--manifest",
         str(pair / "m.json"), "--json", *extra],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def test_preflight_for_vllm_from_its_own_flag(pair: Path) -> None:
    """``--speculative-config`` as given to vLLM: the vLLM-convention copy passes; the SGLang-convention
    draft is served one block early, with the fix for vLLM; the embedding draft's crash is named."""
    rc, out = preflight(pair, "draft-no-embed-vllm", "--vllm-version", "0.32.0")
    assert rc == 0 and out["engine"] == "vllm" and out["engine_version"] == "0.32.0"
    aux = out["hello"]["aux"]
    assert (aux["ids_read"], aux["ids_location"], aux["capture_canonical"]) == (
        [1, 3, 6],
        "top_level",
        [0, 2, 5],
    )
    rc, out = preflight(pair, "draft-no-embed")
    (f,) = [f for f in out["findings"] if f["code"] == "LAYER_MAP_MISMATCH"]
    assert rc == 1 and "served layers [-1, 1, 4]" in f["message"]
    assert "[1, 3, 6] at the top level" in f["fix"]
    rc, out = preflight(pair, "draft")
    (f,) = [f for f in out["findings"] if f["code"] == "LAYER_MAP_MISMATCH"]
    assert rc == 1 and "never reaches id -1" in f["message"] and "fails at the first request" in f["message"]


def test_preflight_refuses_a_vllm_release_it_does_not_know(pair: Path) -> None:
    spec = json.dumps({"method": "eagle3", "model": str(pair / "draft"), "num_speculative_tokens": 3})
    r = subprocess.run(
        [*CLI, "preflight", "--model", str(pair / "target"), "--speculative-config", spec, "--vllm-version", "0.31.0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "vLLM 0.31.0 is outside the releases eagle3-top knows" in r.stderr


class _Sched:
    def __init__(self, spec: dict[str, list[int]], finished: set[str] | None = None) -> None:
        self.scheduled_spec_decode_tokens, self.finished_req_ids = spec, finished or set()


class _Output:
    def __init__(self, rids: list[str], sampled: list[list[int]]) -> None:
        self.req_ids, self.sampled_token_ids = rids, sampled


class _Pending:
    """vLLM's ``AsyncGPUModelRunnerOutput`` as the plugin sees it: the tokens come with ``get_output``."""

    def __init__(self, out: _Output) -> None:
        self.out = out

    def get_output(self) -> _Output:
        return self.out


def _runner() -> tuple[Any, Any]:
    from eagle3_top.hooks.vllm import plugin
    from eagle3_top.tracer.serving.publisher import MemoryPublisher
    from eagle3_top.tracer.serving.tracer import Tracer

    pub = MemoryPublisher()
    runner = type("Runner", (), {})()
    setattr(runner, plugin.STATE_ATTR, plugin.RunnerState(Tracer(pub)))
    return runner, pub


def test_the_plugin_publishes_the_rows_vllm_counts_sync_and_async() -> None:
    """A row counts when vLLM scheduled drafts for it and it committed tokens (vLLM's own rule);
    the root is the request's last committed token; async outputs publish once vLLM reads them."""
    from eagle3_top.hooks.vllm import plugin

    runner, pub = _runner()
    steps = [
        (_Sched({}), _Output(["a", "b"], [[11], [21]])),  # prefill: no drafts, nothing counted
        (_Sched({"a": [12, 13, 14], "b": [22, 23, 24]}), _Output(["a", "b"], [[12, 13, 99], [25]])),
        (_Sched({"a": [7, 8, 9]}, finished={"b"}), _Output(["a"], [[7, 8, 9, 10]])),
    ]
    for sched, out in steps:
        plugin._around_execute_model(lambda self, so: None, runner, sched)
        plugin._around_sample_tokens(lambda self, *a, out=out: out, runner, None)
    bodies = pub.bodies("step")
    assert len(bodies) == 2
    first, second = (step_view(Event("step", "x:1:r0", i, 0.0, b)) for i, b in enumerate(bodies))
    assert first.rids == ["a", "b"] and first.accepted.tolist() == [2, 0]
    assert first.draft.tolist() == [[11, 12, 13, 14], [21, 22, 23, 24]]  # roots from the prefill
    assert second.draft.tolist() == [[99, 7, 8, 9]] and second.accepted.tolist() == [3]
    assert plugin._state(runner).roots.last == {"a": 10}  # b finished: forgotten

    runner, pub = _runner()
    pending = _Pending(_Output(["c"], [[5, 6]]))
    plugin._around_execute_model(lambda self, so: None, runner, _Sched({"c": [-1, -1, -1]}))
    assert plugin._around_sample_tokens(lambda self, *a: pending, runner, None) is pending
    assert pub.bodies("step") == []  # the tokens are not on the host yet
    plugin._around_get_output(_Pending.get_output, pending)
    (body,) = pub.bodies("step")
    sv = step_view(Event("step", "x:1:r0", 0, 0.0, body))
    assert sv.accepted.tolist() == [1] and sv.draft.tolist() == [[-1, -1, -1, -1]]


def test_ids_at_the_top_level_get_the_fix_of_the_engine_at_hand(pair: Path) -> None:
    """The same directory (SGLang-convention ids at the top level): SGLang never reads them and falls
    back to its default layers; vLLM reads them and serves one block early. Each fix is its engine's."""
    r = subprocess.run(
        [*CLI, "preflight", "--model-path", str(pair / "target"), "--speculative-draft-model-path",
         str(pair / "draft-no-embed-ids-not-read"), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--manifest", str(pair / "m.json"), "--json", "--from-table", "--sglang-version", "0.5.23"],
        capture_output=True, text=True,
    )  # fmt: skip
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "LAYER_IDS_NOT_READ"]
    assert (
        r.returncode == 1
        and "found at the config's top level, where SGLang does not read them" in f["message"]
    )
    assert (
        f["fix"] == "put eagle_config.eagle_aux_hidden_state_layer_ids = [0, 2, 5] in the draft's config.json"
    )
    rc, out = preflight(pair, "draft-no-embed-ids-not-read")
    (f,) = [f for f in out["findings"] if f["code"] == "LAYER_MAP_MISMATCH"]
    assert (
        rc == 1
        and out["hello"]["aux"]["ids_location"] == "top_level"
        and "served layers [-1, 1, 4]" in f["message"]
    )
    assert "put eagle_aux_hidden_state_layer_ids = [1, 3, 6] at the top level" in f["fix"]
