"""The hello from SGLang's real objects, on CPU: the requested and effective flags as SGLang's own
resolution makes them, the layer ids SGLang reads, the live capture list of its real targets and the
draft's widths, for every way a draft config can be written; our layer rules against SGLang's other
model families; and the findings a deploy gate gets from those hellos.

Everything that imports sglang runs in a child interpreter (``sglang_cpu``); pytest reads the JSON
it prints. ``make test`` runs this file against SGLang 0.5.23 and 0.5.17."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from types import SimpleNamespace
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402
from sglang_objects import (  # noqa: E402
    DRAFT_VOCAB,
    HIDDEN,
    LAYER_CASES,
    N_LAYERS,
    VOCAB,
    build,
    launcher_argv,
    server_args,
    sglang_effective,
    write_models,
)

# -- child side (runs with the stand-ins installed) --------------------------------------------------


def child_wiring() -> dict[str, Any]:
    import tempfile

    from eagle3_top.hooks.sglang.spec_flags import spec_report
    from eagle3_top.hooks.sglang.wiring import wiring_from_objects
    from eagle3_top.tracer.schema import Hello

    def spec_json(rep: Any) -> Any:  # the hello's spec section, as it goes on the wire
        hello = Hello(
            requested=rep.requested,
            effective=rep.effective,
            rewrites=rep.rewrites,
            requested_source=rep.requested_source,
            max_running_requests=rep.max_running_requests,
        )
        return hello.to_body()["spec"]

    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix="e3t-sgl-")
    out: dict[str, Any] = {"layers": {}, "spec": {}}

    # -- spec rewrites, by SGLang's own resolution pipeline ----------------------------------
    import sglang

    out["version"] = sglang.__version__
    tdir, ddir = write_models(root, "spec", LAYER_CASES["nested"])
    topk1 = dict(speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=16)
    sa = server_args(tdir, ddir, **topk1)
    # argv as the scheduler process inherits it from the launcher (0.5.17 needs it; 0.5.23 does not)
    out["spec"]["topk1"] = spec_json(
        spec_report(sa, target_arch="LlamaForCausalLM", argv=launcher_argv(tdir, ddir, **topk1))
    )
    out["spec"]["topk1_sglang_effective"] = sglang_effective(sa, "speculative_num_draft_tokens")
    out["spec"]["keeps_raw_inputs"] = hasattr(sa, "resolve_once")
    if out["spec"]["keeps_raw_inputs"]:  # the view wiring.py reads, where SGLang's launcher reads it
        from sglang.srt.arg_groups.overrides import resolving_view

        view = resolving_view(sa)
        out["spec"]["view_num_draft_tokens"] = view.speculative_num_draft_tokens
    sa_auto = server_args(tdir, ddir)
    out["spec"]["auto"] = spec_json(
        spec_report(sa_auto, target_arch="LlamaForCausalLM", argv=launcher_argv(tdir, ddir))
    )
    # 0.5.17 style: ServerArgs already rewritten in place, requested values only in argv
    old = SimpleNamespace(
        _resolved_overrides=[("model_override", {"disable_radix_cache": True})],  # 0.5.17 has one too
        speculative_algorithm="EAGLE3",
        speculative_num_steps=1,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=2,
        max_running_requests=48,
    )
    argv = [
        "--model-path",
        tdir,
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "1",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "16",
    ]
    out["spec"]["argv"] = spec_json(spec_report(old, argv=argv, target_arch="LlamaForCausalLM"))
    out["spec"]["unknown"] = spec_json(spec_report(old, argv=[], target_arch="LlamaForCausalLM"))

    # -- layer ids: real reading, real capture setup, our report --------------------------------
    for name, case in LAYER_CASES.items():
        tdir, ddir = write_models(root, name, case)
        sa = server_args(
            tdir, ddir, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
        )
        aux_cfg, target, draft_runner, runner = build(sa, ddir)
        draft = draft_runner.model
        hello = wiring_from_objects(sa, target, draft, ddir, target_runner=runner, draft_runner=draft_runner)
        out["layers"][name] = {
            "sglang_ids": aux_cfg.eagle_aux_hidden_state_layer_ids,
            "sglang_layers_to_capture": list(target.model.layers_to_capture),
            "sglang_capture_aux": bool(target.capture_aux_hidden_states),
            "sglang_fc_in": int(draft.model.fc.in_features),
            "hello": hello.to_body(),
        }
    out["arch_rules"] = _arch_rules()
    json.dumps(out)  # must be plain data, as it goes on the wire
    return out


ARCH_ID_CASES = [[1, 3, 5], [2, 4, 6], [-1, 2, 5], [0, 3, 8], [3, 3, 5], [5, 1, 3]]


def _arch_rules() -> list[dict[str, Any]]:
    """SGLang's real ``set_eagle3_layers_to_capture`` of other families, run on stand-in selves:
    our offline rule (``layers.native_from_ids``) must store what SGLang stores, and our live
    reader (``wiring.live_capture``) must find it (``layers_to_capture`` or the ``_is_layer_to_capture``
    flags)."""
    import dataclasses
    import functools

    from eagle3_top.tracer.engines.sglang import capture as ln
    from eagle3_top.tracer.serving.wiring import live_capture
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM
    from sglang.srt.models.gpt_oss import GptOssForCausalLM
    from sglang.srt.models.qwen2_moe import Qwen2MoeModel
    from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM

    n = 8
    rows = []
    for cls, fam, arch in (
        (DeepseekV2ForCausalLM, ln.DEEPSEEK, "DeepseekV3ForCausalLM"),
        (GptOssForCausalLM, ln.GPT_OSS, "GptOssForCausalLM"),
        (Qwen3MoeForCausalLM, ln.LLAMA, "Qwen3MoeForCausalLM"),
    ):
        for ids in [None, *ARCH_ID_CASES]:
            inner = SimpleNamespace(layers=[SimpleNamespace() for _ in range(n)], layers_to_capture=[])
            inner.set_eagle3_layers_to_capture = functools.partial(
                Qwen2MoeModel.set_eagle3_layers_to_capture, inner
            )
            me = SimpleNamespace(
                pp_group=SimpleNamespace(is_last_rank=True),
                config=SimpleNamespace(num_hidden_layers=n, architectures=[arch]),
                model=inner,
            )
            try:
                cls.set_eagle3_layers_to_capture(me, None if ids is None else list(ids))
                stored, err = list(inner.layers_to_capture), None
            except Exception as exc:  # e.g. an out-of-range flag index
                stored, err = None, type(exc).__name__
            live = dataclasses.asdict(live_capture(me)) if err is None else None
            flags_only = None
            if err is None and fam == ln.LLAMA:
                del inner.layers_to_capture  # Qwen3-Next / Qwen3.5 style: only flags
                flags_only = dataclasses.asdict(live_capture(me))
            rows.append(
                {
                    "arch": arch,
                    "family": fam,
                    "ids": ids,
                    "stored": stored,
                    "error": err,
                    "ours": ln.native_from_ids(ln.family_of(None, arch), ids, n),
                    "live": live,
                    "flags_only": flags_only,
                }
            )
    return rows


# -- pytest side ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wiring() -> dict[str, Any]:
    return sglang_cpu.run_child("test_sglang_wiring", "child_wiring")


def test_children_run_the_sglang_under_test(wiring: dict[str, Any]) -> None:
    from eagle3_top.hooks.sglang.plugin import version_problem

    assert wiring["version"] == importlib.metadata.version("sglang")
    assert version_problem(wiring["version"]) is None


def test_topk1_rewrite_reported_as_sglang_resolved_it(wiring: dict[str, Any]) -> None:
    spec = wiring["spec"]["topk1"]
    assert wiring["spec"]["topk1_sglang_effective"] == 2  # SGLang's own pipeline did the rewrite
    if wiring["spec"]["keeps_raw_inputs"]:
        assert wiring["spec"]["view_num_draft_tokens"] == 2
    assert spec["requested"] == {"algorithm": "EAGLE3", "num_steps": 1, "topk": 1, "num_draft_tokens": 16}
    assert spec["effective"] == {"algorithm": "EAGLE3", "num_steps": 1, "topk": 1, "num_draft_tokens": 2}
    # 0.5.23 keeps the raw inputs and records the rewrite; 0.5.17 rewrites in place (argv says)
    assert spec["requested_source"] == (
        "declare_resolution" if wiring["spec"]["keeps_raw_inputs"] else "argv"
    )
    rw = {r["param"]: r for r in spec["rewrites"]}
    assert rw["num_draft_tokens"]["from"] == 16 and rw["num_draft_tokens"]["to"] == 2
    assert "topk=1" in rw["num_draft_tokens"]["reason"]
    assert rw["max_running_requests"]["to"] == 48 and rw["max_running_requests"]["from"] is None


def test_auto_chosen_params_reported(wiring: dict[str, Any]) -> None:
    spec = wiring["spec"]["auto"]
    assert spec["requested"]["num_steps"] is None
    assert spec["effective"] == {"algorithm": "EAGLE3", "num_steps": 5, "topk": 4, "num_draft_tokens": 8}
    rw = {r["param"]: r for r in spec["rewrites"]}
    assert {"num_steps", "topk", "num_draft_tokens"} <= set(rw)
    assert "auto-chooses" in rw["num_steps"]["reason"]


def test_requested_from_argv_when_server_args_were_rewritten_in_place(wiring: dict[str, Any]) -> None:
    spec = wiring["spec"]["argv"]
    assert spec["requested_source"] == "argv"
    assert spec["requested"]["num_draft_tokens"] == 16 and spec["effective"]["num_draft_tokens"] == 2
    assert [r["param"] for r in spec["rewrites"]][:1] == ["num_draft_tokens"]
    unknown = wiring["spec"]["unknown"]
    assert unknown["requested_source"] == "unknown" and unknown["rewrites"] == []


@pytest.mark.parametrize("name", list(LAYER_CASES))
def test_reported_layers_match_sglang_objects(wiring: dict[str, Any], name: str) -> None:
    case = wiring["layers"][name]
    aux = case["hello"]["aux"]
    ltc = case["sglang_layers_to_capture"]
    # what the live target holds, verbatim
    assert aux["capture_native"] == ltc
    assert aux["ids_read"] == case["sglang_ids"]
    assert aux["capture_source"] == "layers_to_capture"
    # canonical = what the forward loop really captures: input of layer i, ascending, once, in range
    assert aux["capture_canonical"] == [i - 1 for i in sorted(set(ltc)) if 0 <= i < N_LAYERS]
    assert aux["slots"] == len(aux["capture_canonical"])
    assert aux["expected_width"] == case["sglang_fc_in"]
    if case["sglang_capture_aux"]:
        assert aux["width"] == aux["slots"] * HIDDEN
        # SGLang sizes the draft's input (its draft-extend buffers) from the draft config alone:
        # the number of ids it lists, wherever they sit, or 3
        assert aux["input_width"] == 3 * HIDDEN
    else:  # no aux capture: the draft is fed the final hidden state, and sized for it
        assert aux["width"] == aux["input_width"] == HIDDEN and aux["slots"] == 0
    assert case["hello"]["model"]["num_layers"] == N_LAYERS
    assert case["hello"]["model"]["draft_arch"] == "LlamaForCausalLMEagle3"


def test_layer_cases_show_the_known_failure_modes(wiring: dict[str, Any]) -> None:
    L = {k: v["hello"]["aux"] for k, v in wiring["layers"].items()}
    assert L["nested"]["ids_read"] == [0, 2, 3] and L["nested"]["capture_canonical"] == [0, 2, 3]
    assert L["nested"]["ids_location"] == "eagle_config"
    # top-level ids: declared, not read -> SGLang default [2, n//2, n-3] = canonical [1, 2, 2]... once
    for name in ("top_level", "missing"):
        assert L[name]["ids_read"] is None
        assert L[name]["capture_native"] == [2, N_LAYERS // 2, N_LAYERS - 3]
    assert L["top_level"]["declared_ids"] == [0, 2, 3] and L["top_level"]["ids_location"] == "top_level"
    assert L["missing"]["declared_ids"] is None and L["missing"]["ids_location"] == "missing"
    assert L["minus_one"]["capture_canonical"] == [-1, 2, 3]
    assert L["out_of_order"]["capture_native"] == [4, 1, 3]
    assert L["out_of_order"]["capture_canonical"] == [0, 2, 3]  # slots reordered vs training
    assert L["duplicated"]["slots"] == 2 and L["duplicated"]["expected_width"] == 3 * HIDDEN
    assert L["unreachable"]["capture_native"][-1] == N_LAYERS and L["unreachable"]["slots"] == 2
    off = L["aux_off"]
    assert off["use_aux_hidden_state"] is False and off["slots"] == 0 and off["capture_canonical"] == []
    assert off["width"] == HIDDEN and off["expected_width"] == 3 * HIDDEN


def test_other_families_rules_match_sglang_code(wiring: dict[str, Any]) -> None:
    from eagle3_top.tracer.engines.sglang import capture as ln

    n = 8
    for row in wiring["arch_rules"]:
        if row["error"] is not None:
            # only an id past the last layer can fail here (flag index out of range)
            assert row["family"] == ln.LLAMA and max(row["ids"]) + 1 >= n, row
            continue
        assert row["ours"] == row["stored"], row
        assert row["live"]["native"] == row["stored"], row
        if row["flags_only"] is not None:
            assert row["flags_only"]["source"] == "_is_layer_to_capture"
            assert row["flags_only"]["native"] == sorted(set(row["stored"]))
    ds = {tuple(r["ids"] or ()): r for r in wiring["arch_rules"] if r["family"] == ln.DEEPSEEK}
    assert ds[(1, 3, 5)]["stored"] == [2, 4, 6]  # first id 1: +1
    assert ds[(2, 4, 6)]["stored"] == [2, 4, 6]  # otherwise as given
    assert ln.canonical_from_native(ln.DEEPSEEK, [2, 4, 6], n) == [1, 3, 5]
    assert ln.capture_failure(ln.DEEPSEEK, ds[(-1, 2, 5)]["stored"], n) is not None
    go = {tuple(r["ids"] or ()): r for r in wiring["arch_rules"] if r["family"] == ln.GPT_OSS}
    assert go[(0, 3, 8)]["stored"] == [0, 3, 8]  # boundary indices, used as given
    assert ln.canonical_from_native(ln.GPT_OSS, [0, 3, 8], n) == [-1, 2, 7]


def test_hello_shape_mirrors_toy(wiring: dict[str, Any]) -> None:
    hello = wiring["layers"]["nested"]["hello"]
    assert set(hello) >= {"engine", "model", "tp", "spec", "vocab", "aux"}
    assert hello["engine"]["name"] == "sglang"
    assert set(hello["model"]) >= {
        "target_path",
        "draft_path",
        "arch",
        "num_layers",
        "hidden_size",
        "vocab_size",
        "dtype",
        "draft_arch",
        "draft_vocab_size",
    }
    assert set(hello["aux"]) >= {
        "eagle_config",
        "declared_ids",
        "ids_location",
        "ids_read",
        "use_aux_hidden_state",
        "capture_native",
        "capture_canonical",
        "convention",
        "slots",
        "width",
        "expected_width",
    }
    assert hello["aux"]["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}
    v = hello["vocab"]
    assert v["size"] == DRAFT_VOCAB and v["max_target"] == 4 * (DRAFT_VOCAB - 1) and v["vocab_size"] == VOCAB
    assert hello["spec"]["effective"]["num_draft_tokens"] == 4


def _findings(hello: dict[str, Any], trained: list[int] | None) -> set[str]:
    from eagle3_top.tracer.analysis.diagnose import diagnose
    from eagle3_top.tracer.analysis.evidence import SourceEvidence
    from eagle3_top.tracer.analysis.manifest import Manifest
    from eagle3_top.tracer.schema import Hello

    ev = SourceEvidence("sglang:1:r0", hello=Hello.from_body(hello))
    manifest = None
    if trained is not None:
        manifest = Manifest.from_json(
            {
                "eagle3_top_manifest": 1,
                "aux": {
                    "layer_ids": trained,
                    "concat_order": trained,
                    "slots": len(trained),
                    "slot_width": HIDDEN,
                },
                "reference": {"fingerprint": {"rms": [1.0] * len(trained), "mean": [0.0] * len(trained)}},
            },
            "m.json",
        )
    return {f.code for f in diagnose(ev, manifest)}


def test_diagnosis_on_sglang_hellos(wiring: dict[str, Any]) -> None:
    """The findings a deploy gate gets from SGLang's real objects, cause by cause."""
    L = {k: v["hello"] for k, v in wiring["layers"].items()}
    trained = [0, 2, 3]
    assert _findings(L["nested"], trained) == set()
    # ids not read: SGLang's default for 6 layers, [2, 3, 3], also collapses to two slots, a width
    # mismatch the ids not read explain (inside that finding, not beside it)
    not_read = {"LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH"}
    assert _findings(L["top_level"], trained) == not_read
    assert _findings(L["missing"], trained) == not_read
    assert _findings(L["out_of_order"], [3, 0, 2]) == {"LAYER_ORDER_MISMATCH"}
    assert "AUX_WIDTH_MISMATCH" in _findings(L["duplicated"], None)
    assert "AUX_WIDTH_MISMATCH" in _findings(L["unreachable"], None)
    # the embedding slot on a Llama target: right wiring, but 0.5.17 - 0.5.21 crash at the first
    # prefill (tests/test_sglang_defects.py sees that in this release's own forward)
    from eagle3_top.tracer.engines.sglang.defects import known_defects

    crashes = bool(known_defects(wiring["version"], "LlamaForCausalLM", [-1, 2, 3], N_LAYERS))
    assert _findings(L["minus_one"], [-1, 2, 3]) == ({"ENGINE_KNOWN_DEFECT"} if crashes else set())
    # use_aux_hidden_state: false: SGLang captures nothing and feeds the final hidden state
    assert _findings(L["aux_off"], trained) == {"AUX_WIDTH_MISMATCH"}
    assert _findings(L["aux_off"], None) == {"AUX_WIDTH_MISMATCH"}
