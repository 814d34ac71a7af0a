"""Each finding code fires for a real cause and stays quiet when healthy (hello-level and statistics)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from eagle3_top.tracer.analysis.diagnose import MIN_AUX_ROWS, diagnose
from eagle3_top.tracer.analysis.evidence import EvidenceBook, SourceEvidence
from eagle3_top.tracer.analysis.findings import has_errors
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.schema import AUX, HELLO, STEP, Event, step_body

REF_RMS = [0.06, 4.0, 15.0]
RNG = np.random.default_rng(11)
REF_SKETCH = RNG.standard_normal((3, 16)).tolist()


def _manifest(**over) -> Manifest:
    data = {
        "eagle3_top_manifest": 1,
        "target": {"arch": "LlamaForCausalLM", "num_layers": 8, "hidden_size": 128},
        "draft": {"arch": "LlamaForCausalLMEagle3", "draft_vocab_size": 192},
        "aux": {"layer_ids": [-1, 2, 5], "concat_order": [-1, 2, 5], "slots": 3, "slot_width": 128},
        "reference": {"fingerprint": {"rms": REF_RMS, "mean": [0.0, 0.1, 0.2], "sketch": REF_SKETCH}},
        "training": {"acc": [0.8, 0.75, 0.7]},
        "vocab": {
            "size": 192,
            "min_target": 0,
            "max_target": 255,
            "unique_targets": 192,
            "all_zero": False,
            "vocab_size": 256,
        },
    }
    data.update(over)
    return Manifest.from_json(data, "m.json")


HEALTHY_HELLO = {
    "model": {
        "arch": "LlamaForCausalLM",
        "num_layers": 8,
        "hidden_size": 128,
        "draft_arch": "LlamaForCausalLMEagle3",
    },
    "spec": {
        "requested": {"algorithm": "EAGLE3", "num_steps": 3, "topk": 1, "num_draft_tokens": None},
        "effective": {"algorithm": "EAGLE3", "num_steps": 3, "topk": 1, "num_draft_tokens": 4},
        "rewrites": [],
    },
    "aux": {
        "ids_read": [-1, 2, 5],
        "declared_ids": [-1, 2, 5],
        "ids_location": "eagle_config",
        "use_aux_hidden_state": True,
        "capture_native": [0, 3, 6],
        "capture_canonical": [-1, 2, 5],
        "slots": 3,
        "width": 384,
        "expected_width": 384,
    },
}


def _evidence(
    hello: dict, rms=REF_RMS, sketch=REF_SKETCH, accepted_p=(0.8, 0.75, 0.7), steps=40
) -> SourceEvidence:
    events = [Event(HELLO, "h:1:r0", 0, 1.0, copy.deepcopy(hello))]
    seq = 0
    for _ in range(3):
        seq += 1
        events.append(
            Event(
                AUX,
                "h:1:r0",
                seq,
                1.0,
                {
                    "rows": MIN_AUX_ROWS,
                    "slots": 3,
                    "rms": list(rms),
                    "mean": [0, 0, 0],
                    "absmax": [1, 1, 1],
                    "sketch": sketch,
                },
            )
        )
    for i in range(steps):
        # chain of 3: draw accepted lengths with the given conditional rates
        acc = np.zeros(8, dtype=np.int32)
        alive = np.ones(8, dtype=bool)
        for p in accepted_p:
            alive &= RNG.random(8) < p
            acc += alive
        body = step_body(
            step=i,
            rids=[f"r{j}" for j in range(8)],
            draft=RNG.integers(1, 256, (8, 4)),
            accept_lens=acc + 1,
            tokens=RNG.integers(1, 256, int(acc.sum()) + 8),
        )
        seq += 1
        events.append(Event(STEP, "h:1:r0", seq, 1.0 + i * 0.01, body))
    return _ingest(events)


def _ingest(events: list[Event]) -> SourceEvidence:
    book = EvidenceBook()
    assert book.ingest(events, 1.0, _no_malformed) == len(events)
    return book.sources["h:1:r0"]


def _no_malformed(reason: str) -> None:
    raise AssertionError(reason)


def codes(findings) -> set[str]:
    return {f.code for f in findings}


def test_healthy_source_has_no_findings() -> None:
    assert diagnose(_evidence(HEALTHY_HELLO), _manifest()) == []
    assert diagnose(_evidence(HEALTHY_HELLO), None) == []


def test_motivating_bug_names_layers_and_fix() -> None:
    hello = _served_by("0.5.23", "LlamaForCausalLM")
    hello["aux"].update(
        ids_read=None, ids_location="top_level", capture_native=[2, 4, 5], capture_canonical=[1, 3, 4]
    )
    ev = _evidence(hello, rms=[4.0, 10.0, 15.0], accepted_p=(0.3, 0.5, 0.5))
    found = diagnose(ev, _manifest())
    # one cause, one finding: the ids not read (the cause) and the layer map (the fact a user checks);
    # the symptoms they explain are evidence inside the cause, not findings beside it; AUX_STATS_DRIFT
    # is kept for a slot whose layer is right
    assert codes(found) == {"LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH"}
    lm = next(f for f in found if f.code == "LAYER_MAP_MISMATCH")
    assert "[1, 3, 4]" in lm.message and "[-1, 2, 5]" in lm.message and "[2, 4, 5]" in lm.message
    assert lm.fix.endswith(
        "put eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 2, 5] in the draft's config.json"
    )
    nr = next(f for f in found if f.code == "LAYER_IDS_NOT_READ")
    assert "top level, where SGLang does not read them" in nr.message
    assert (
        nr.fix == "put eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 2, 5] in the draft's config.json"
    )
    explained = {e["code"] for e in nr.evidence["explains"]}
    # the gate's error (less than half training's gain) and the per-position symptom, inside the cause
    assert explained == {"ACCEPT_LENGTH_FAR_BELOW_EXPECTED", "ACCEPTANCE_BELOW_TRAINING"}
    assert "explains: accept length" in nr.message and "against 2.82 expected" in nr.message
    assert has_errors(found)


def test_a_symptom_without_a_cause_stands_alone_and_says_what_to_run() -> None:
    ev = _evidence(_served_by("0.5.23", "LlamaForCausalLM"), accepted_p=(0.3, 0.5, 0.5))
    found = diagnose(ev, _manifest())
    # the accept length, with the per-position detail it explains inside it
    assert codes(found) == {"ACCEPT_LENGTH_FAR_BELOW_EXPECTED"}
    (far,) = found
    assert [e["code"] for e in far.evidence["explains"]] == ["ACCEPTANCE_BELOW_TRAINING"]
    assert "eagle3-top probe" in far.fix and "eagle3-top preflight" in far.fix


def test_a_crash_with_a_named_cause_says_so() -> None:
    """The width the draft's fc expects is not what the target captures: the engine's forward fails,
    and the finding is the width, saying that it crashed the engine."""
    from eagle3_top.tracer.schema import HEALTH

    hello = _served_by("0.5.23", "LlamaForCausalLM")
    hello["aux"].update(capture_native=[3, 3, 6], capture_canonical=[2, 5], slots=2, width=256)
    crash = Event(
        HEALTH,
        "h:1:r0",
        999,
        2.0,
        {"engine_error": "RuntimeError: mat1 and mat2 shapes cannot be multiplied (5x256 and 384x128)"},
    )
    ev = _evidence(hello)
    book = EvidenceBook()
    book.sources[ev.key] = ev
    book.ingest([crash], 2.0, _no_malformed)
    found = diagnose(book.sources[ev.key], None)
    assert codes(found) == {"AUX_WIDTH_MISMATCH"}
    (f,) = found
    assert (
        f.message.startswith("the engine crashed (RuntimeError: mat1 and mat2 shapes")
        and "because aux width 256" in f.message
    )
    # without a cause, the crash stands alone
    ev2 = _evidence(_served_by("0.5.23", "LlamaForCausalLM"))
    book2 = EvidenceBook()
    book2.sources[ev2.key] = ev2
    book2.ingest([crash], 2.0, _no_malformed)
    assert codes(diagnose(book2.sources[ev2.key], None)) == {"ENGINE_FAILED"}


def test_order_mismatch() -> None:
    hello = copy.deepcopy(HEALTHY_HELLO)
    hello["aux"]["capture_canonical"] = [-1, 2, 5]
    found = diagnose(
        _evidence(hello),
        _manifest(aux={"layer_ids": [5, 2, -1], "concat_order": [5, 2, -1], "slots": 3, "slot_width": 128}),
    )
    assert "LAYER_ORDER_MISMATCH" in codes(found) and "LAYER_MAP_MISMATCH" not in codes(found)


def test_width_mismatch_from_duplicate_ids() -> None:
    hello = copy.deepcopy(HEALTHY_HELLO)
    hello["aux"].update(capture_native=[3, 3, 6], capture_canonical=[2, 5], slots=2, width=256)
    found = diagnose(_evidence(hello), None)
    assert codes(found) == {"AUX_WIDTH_MISMATCH"}


def test_flag_rewrite_and_algorithm() -> None:
    hello = copy.deepcopy(HEALTHY_HELLO)
    hello["spec"]["requested"].update(num_steps=1, num_draft_tokens=16)
    hello["spec"]["effective"].update(num_steps=1, num_draft_tokens=2)
    hello["spec"]["rewrites"] = [
        {
            "param": "num_draft_tokens",
            "from": 16,
            "to": 2,
            "reason": "topk=1 forces num_draft_tokens = num_steps + 1",
        }
    ]
    found = diagnose(_evidence(hello), None)
    assert codes(found) == {"SPEC_PARAM_REWRITTEN"}
    assert "16 → 2" in found[0].message
    hello = copy.deepcopy(HEALTHY_HELLO)
    hello["spec"]["effective"]["algorithm"] = "EAGLE"
    assert "ALGORITHM_MISMATCH" in codes(diagnose(_evidence(hello), None))


def test_statistics_wait_for_evidence() -> None:
    hello = copy.deepcopy(HEALTHY_HELLO)
    ev = _ingest(
        [
            Event(HELLO, "h:1:r0", 0, 1.0, hello),
            Event(
                AUX,
                "h:1:r0",
                1,
                1.0,
                {
                    "rows": 10,
                    "slots": 3,
                    "rms": [9, 9, 9],
                    "mean": [0] * 3,
                    "absmax": [1] * 3,
                    "sketch": REF_SKETCH,
                },
            ),
        ]
    )
    assert diagnose(ev, _manifest()) == []  # 10 rows: not enough to call drift


@pytest.mark.parametrize(
    "vocab, reason",
    [
        (
            {"size": 192, "min_target": 0, "max_target": 300, "unique_targets": 192, "vocab_size": 256},
            "outside",
        ),
        (
            {"size": 100, "min_target": 0, "max_target": 99, "unique_targets": 100, "vocab_size": 256},
            "draft_vocab_size",
        ),
        (
            {
                "size": 192,
                "min_target": 0,
                "max_target": 191,
                "unique_targets": 192,
                "all_zero": True,
                "vocab_size": 256,
            },
            "all offsets are zero",
        ),
    ],
)
def test_vocab_map_invalid(vocab, reason) -> None:
    found = diagnose(_evidence(HEALTHY_HELLO), _manifest(vocab=vocab))
    assert codes(found) == {"VOCAB_MAP_INVALID"}
    assert reason in found[0].message


def test_direction_of_an_incoherent_slot_is_not_judged() -> None:
    """An embedding slot: rows point every which way, so the mean row of a few hundred of them is
    noise and its direction may differ from training's without anything being wrong."""
    live_sketch = [list(-np.asarray(REF_SKETCH[0]) * 1e-3), REF_SKETCH[1], REF_SKETCH[2]]  # opposite, tiny
    ref = copy.deepcopy(REF_SKETCH)
    ref[0] = list(np.asarray(ref[0]) * 1e-3)
    m = _manifest(reference={"fingerprint": {"rms": REF_RMS, "mean": [0.0, 0.1, 0.2], "sketch": ref}})
    assert diagnose(_evidence(HEALTHY_HELLO, sketch=live_sketch), m) == []
    # a coherent slot pointing elsewhere is judged
    coherent = copy.deepcopy(REF_SKETCH)
    coherent[1] = list(np.asarray(REF_SKETCH[1]) * 10)  # |mean row| ~ 0.8 of a row
    turned = copy.deepcopy(coherent)
    turned[1] = list(-np.asarray(coherent[1]))
    m = _manifest(reference={"fingerprint": {"rms": REF_RMS, "mean": [0.0, 0.1, 0.2], "sketch": coherent}})
    assert diagnose(_evidence(HEALTHY_HELLO, sketch=coherent), m) == []
    assert codes(diagnose(_evidence(HEALTHY_HELLO, sketch=turned), m)) == {"AUX_STATS_DRIFT"}


def _served_by(version: str, arch: str, hello: dict = HEALTHY_HELLO) -> dict:
    h = copy.deepcopy(hello)
    h["engine"] = {"name": "sglang", "version": version}
    h["model"]["arch"] = arch
    return h


@pytest.mark.parametrize(
    ("version", "arch", "symptom", "fixed"),
    [
        # the two seen on real servers (an H200 and an H100 serving the built-in pair with SGLang 0.5.17)
        ("0.5.17", "LlamaForCausalLM", "crash", "0.5.22"),
        ("0.5.21.post1", "LlamaForCausalLM", "crash", "0.5.22"),
        ("0.5.22", "LlamaForCausalLM", None, None),
        ("0.5.17", "Qwen2ForCausalLM", "values", "0.5.21"),
        ("0.5.20", "Qwen2ForCausalLM", "values", "0.5.21"),
        ("0.5.21", "Qwen2ForCausalLM", None, None),
        # and what the matrix found beside them, on architectures nobody here has served
        ("0.5.18", "Qwen3ForCausalLM", "values", "0.5.21"),
        ("0.5.19", "GptOssForCausalLM", "values", "0.5.21"),
        ("0.5.20", "Glm4MoeForCausalLM", "crash", "0.5.21"),
        ("0.5.17", "Qwen3MoeForCausalLM", None, None),  # its layer communicator copies the residual
    ],
)
def test_a_known_defect_of_the_serving_release_is_named_before_it_bites(
    version: str, arch: str, symptom: str | None, fixed: str | None
) -> None:
    """From the hello alone, with or without a manifest: the release, the target and the embedding
    slot in the ids read. The table behind it is observed (tracer/engines/sglang/observed.json)."""
    for manifest in (_manifest(), None):
        found = [
            f
            for f in diagnose(_evidence(_served_by(version, arch)), manifest)
            if f.code == "ENGINE_KNOWN_DEFECT"
        ]
        if symptom is None:
            assert found == []
            continue
        (f,) = found
        assert (
            f.severity == "error" and f.evidence["case"] == "embedding" and f.evidence["symptom"] == symptom
        )
        assert f"SGLang {version} with a {arch} target" in f.message and f"fixed in {fixed}" in f.message
        # the way out: the release that fixes it, or training on layers that avoid the slot
        assert (
            f.fix
            == f"upgrade SGLang to {fixed} or later, or retrain the draft on layers that avoid it (e.g. [0, 2, 5] instead of [-1, 2, 5])"
        )


def test_an_architecture_the_table_has_not_seen_is_said_not_passed() -> None:
    found = diagnose(_evidence(_served_by("0.5.23", "MistralForCausalLM")), None)
    (f,) = [f for f in found if f.code == "ENGINE_DEFECTS_UNKNOWN"]
    assert f.severity == "info" and "no observation of a MistralForCausalLM on SGLang 0.5.23" in f.message
    assert "eagle3-top preflight" in f.fix


def test_a_draft_without_the_embedding_slot_meets_no_known_defect() -> None:
    hello = _served_by("0.5.17", "LlamaForCausalLM")
    hello["aux"].update(
        ids_read=[0, 2, 5], declared_ids=[0, 2, 5], capture_native=[1, 3, 6], capture_canonical=[0, 2, 5]
    )
    assert "ENGINE_KNOWN_DEFECT" not in codes(diagnose(_evidence(hello), None))
    other = copy.deepcopy(HEALTHY_HELLO)
    other["engine"] = {"name": "vllm", "version": "0.5.17"}
    assert "ENGINE_KNOWN_DEFECT" not in codes(diagnose(_evidence(other), None))


def test_right_layers_with_wrong_values_say_so_and_name_the_release_defect() -> None:
    """The aliased embedding slot: the layer map matches training, slot 0 carries a late residual
    stream (rms 40 vs 0.06). The release's defect is the cause, and the drift it explains is inside
    it; nothing tells the user to set ids the config already has."""
    aliased = [40.0, REF_RMS[1], REF_RMS[2]]
    found = diagnose(_evidence(_served_by("0.5.17", "Qwen2ForCausalLM"), rms=aliased), _manifest())
    (defect,) = found
    assert defect.code == "ENGINE_KNOWN_DEFECT" and defect.evidence["symptom"] == "values"
    assert "changed in place after capture" in defect.message
    assert (
        "explains: the layer map is right but the values are not: slot 0 (layer -1) rms 40" in defect.message
    )
    (drift,) = defect.evidence["explains"]
    assert drift["code"] == "AUX_STATS_DRIFT" and [s["slot"] for s in drift["evidence"]["slots"]] == [0]
    assert defect.fix.startswith(
        "upgrade SGLang to 0.5.21 or later, or retrain the draft on layers that avoid it"
    )
    assert "eagle_config" not in defect.fix
    # on a release without that defect the same values point at the checkpoint, not at the ids
    found = diagnose(_evidence(_served_by("0.5.23", "Qwen2ForCausalLM"), rms=aliased), _manifest())
    drift = next(f for f in found if f.code == "AUX_STATS_DRIFT")
    assert drift.message.startswith("the layer map is right but the values are not: slot 0 (layer -1) rms 40")
    assert "layer ids are right" in drift.fix and "eagle_config" not in drift.fix


def test_a_probe_of_right_layers_with_wrong_values_names_the_slot_not_the_ids() -> None:
    from eagle3_top.tracer.analysis.diagnose import ProbeEvidence, judge_probe
    from eagle3_top.tracer.schema import Hello

    hello = Hello.from_body(_served_by("0.5.17", "Qwen2ForCausalLM"))
    matrix = np.array([[0.2, 0.1, 0.93], [0.0, 1.0, 0.1], [0.1, 0.2, 1.0]])  # slot 0 looks like block 5
    pe = ProbeEvidence(
        source="h:1:r0", comparisons=[], matrix=matrix, mapping=[None, 1, 2],
        mapping_text="slot 0 (layer -1) matches no trained slot; slots 1, 2 match",
        aux_ok=False, trained_layers=[-1, 2, 5], served_layers=[-1, 2, 5],
        probe_accept=1.11, live_accept=1.1, num_draft_tokens=4, hello=hello,
    )  # fmt: skip
    verdict, f = judge_probe(pe, _manifest())
    assert f.code == "PROBE_MISMATCH" and f.severity == "error"
    assert "the right layers are captured" in verdict
    assert f.message.startswith(
        "the layer map is right (served = trained = [-1, 2, 5]) but slot 0 (layer -1)"
    )
    assert "SGLang 0.5.17 with a Qwen2ForCausalLM target" in f.message
    assert "eagle_config" not in f.fix and f.fix.startswith("upgrade SGLang to 0.5.21")
    assert f.evidence["wrong_slots"] == [0] and f.evidence["defects"] == [
        "sglang-Qwen2ForCausalLM-embedding-0.5.17"
    ]


def test_ids_the_server_does_not_read_are_an_error_even_without_a_manifest() -> None:
    """The draft's own config says [-1, 2, 5]; the server captures its default [1, 3, 4]."""
    hello = copy.deepcopy(HEALTHY_HELLO)
    hello["aux"].update(
        ids_read=None, ids_location="top_level", capture_native=[2, 4, 5], capture_canonical=[1, 3, 4]
    )
    (f,) = [f for f in diagnose(_evidence(hello), None) if f.code == "LAYER_IDS_NOT_READ"]
    assert f.severity == "error"
    # no ids anywhere: the draft may well have been trained on the defaults, so only a warning
    hello["aux"].update(declared_ids=None, ids_location="missing")
    (f,) = [f for f in diagnose(_evidence(hello), None) if f.code == "LAYER_IDS_NOT_READ"]
    assert f.severity == "warning"


def test_a_probe_judges_acceptance_against_the_chain_the_server_runs() -> None:
    """Seen on SGLang 0.5.17: one draft step (16 draft tokens rewritten to 2) reached 1.97 on the
    training samples, healthy for one step; measured against training's 3-step figure it was
    called a wiring fault."""
    from eagle3_top.tracer.analysis.diagnose import ProbeEvidence, judge_probe
    from eagle3_top.tracer.schema import Hello

    def probe(steps: int, ndt: int) -> tuple[str, str]:
        body = copy.deepcopy(HEALTHY_HELLO)
        body["spec"]["effective"].update(num_steps=steps, num_draft_tokens=ndt)
        pe = ProbeEvidence(
            source="h:1:r0", comparisons=[], matrix=np.eye(3), mapping=[0, 1, 2],
            mapping_text="every slot matches", aux_ok=True, trained_layers=[-1, 2, 5],
            served_layers=[-1, 2, 5], probe_accept=1.75, live_accept=None, num_draft_tokens=ndt,
            hello=Hello.from_body(body),
        )  # fmt: skip
        _, f = judge_probe(pe, _manifest())
        return f.code, f.severity

    # training's per-position accuracies [0.8, 0.75, 0.7]: 1.8 for one step, 2.82 for three
    assert probe(1, 2) == ("PROBE_OK", "info")
    assert probe(3, 4) == ("ACCEPTANCE_BELOW_TRAINING", "error")
