"""The findings engine: every rule that turns evidence into findings, in one place.

``judge`` judges what one source's stream showed (its hello, aux fingerprints, acceptance, and the
user's baseline) with or without a training manifest, and computes the layer map once for the
findings and the views; ``judge_probe`` judges a probe exchange (replayed training samples).
Structural findings (layers, widths, flags, release defects) need only the hello; statistical ones
(``AUX_STATS_DRIFT``, ``ACCEPTANCE_BELOW_TRAINING``) wait for enough evidence and use wide margins,
so that a healthy server stays quiet. Engine knowledge (where ids are read, the default layers,
which ids to write, release defects) comes from the engine the hello names (``tracer.engines``).
Explained symptoms are folded into their cause (``codes.fold``). Margins: ``thresholds``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from eagle3_top.tracer import engines
from eagle3_top.tracer.engines.base import Engine, KnownDefect, fix_ids, fmt_ids, version_text
from eagle3_top.tracer.schema import AuxWiring, Hello, VocabSummary

from .codes import fold
from .evidence import SourceEvidence
from .findings import ERROR, INFO, WARNING, Finding
from .layer_map import SlotRow, layer_map
from .manifest import Manifest
from .payoff import payoff_finding
from .probe_compare import ProbeComparison
from .thresholds import MIN_AUX_ROWS, THRESHOLDS, Thresholds

__all__ = [
    "MIN_AUX_ROWS",
    "MIN_REQUEST_STEPS",
    "Judgement",
    "ProbeEvidence",
    "diagnose",
    "judge",
    "judge_probe",
]

# The defaults (tracer/analysis/thresholds.py says what each is); a config file changes them.
MIN_REQUEST_STEPS = THRESHOLDS.min_request_steps

Add = Callable[..., None]
_fmt = fmt_ids


@dataclass(frozen=True)
class Judgement:
    findings: tuple[Finding, ...] = ()  # explained symptoms folded into their causes, errors first
    layer_rows: tuple[SlotRow, ...] = ()  # with a manifest and a hello only


def diagnose(
    ev: SourceEvidence, manifest: Manifest | None = None, th: Thresholds = THRESHOLDS
) -> list[Finding]:
    """Findings for one source; before its hello, only a crash. ``th``: the margins."""
    return list(judge(ev, manifest, th).findings)


def judge(
    ev: SourceEvidence,
    manifest: Manifest | None = None,
    th: Thresholds = THRESHOLDS,
    *,
    now: float | None = None,
    baseline_tok_s: float | None = None,
) -> Judgement:
    """Findings and the layer map for one source. ``baseline_tok_s``: the server's tok/s without
    speculation, to judge the payoff at ``now``."""
    out: list[Finding] = []

    def add(code: str, severity: str, message: str, fix: str, **evidence: Any) -> None:
        out.append(Finding(code, severity, message, fix, ev.key, evidence))

    _engine_failed(ev, add)  # a crash is news with or without a hello
    hello = ev.hello
    if hello is None or not hello.speculates:
        return Judgement(fold(out))  # no draft, layers or acceptance to judge
    if not hello.eagle:
        _not_eagle(hello, manifest, add)
        return Judgement(fold(out))
    engine = engines.engine(hello.engine)
    rows: tuple[SlotRow, ...] = ()
    if manifest is not None:
        rows = tuple(layer_map(hello, ev.aux_merged.merged(), manifest, th.rms_ratio_limit))
    _algorithm(hello, manifest, add)
    _rewrites(hello, add)
    aux = hello.aux or AuxWiring(ids_read_known=False)
    if hello.algorithm != "EAGLE":
        _ids_not_read(hello, engine, aux, manifest, add)
        _width(hello, aux, add)
        _release_defects(hello, engine, manifest, add)
    if manifest is not None:
        _against_manifest(ev, hello, engine, aux, manifest, rows, add, th)
    _accept_length(ev, hello, manifest, add, th)
    if baseline_tok_s is not None and now is not None:
        slower = payoff_finding(ev.key, ev.acceptance, now, baseline_tok_s, th.min_request_steps)
        if slower is not None:
            out.append(slower)
    return Judgement(fold(out), rows)


def _not_eagle(hello: Hello, manifest: Manifest | None, add: Add) -> None:
    """A server that speculates by another method: with a manifest, its EAGLE-3 draft is not served
    at all (an error); without one, a fact (info). Its layers and acceptance are not judged."""
    method = str(hello.algorithm)
    add(
        "SPECULATION_NOT_EAGLE3", ERROR if manifest is not None else INFO,
        f"{_title(engines.engine(hello.engine), hello)} speculates with method {method}, not EAGLE-3: "
        "no layer, width or acceptance of an EAGLE-3 draft is judged",
        "serve the EAGLE-3 draft with its method (vLLM: --speculative-config '{\"method\": \"eagle3\", ...}'; "
        "SGLang: --speculative-algorithm EAGLE3)" if manifest is not None else "none needed if this method is intended",
        algorithm=method,
    )  # fmt: skip


def _engine_failed(ev: SourceEvidence, add: Add) -> None:
    h = ev.health
    if h is None or not h.engine_error:
        return
    add(
        "ENGINE_FAILED", ERROR,
        f"the engine's own forward failed: {h.engine_error}",
        "read the server's log for the traceback; nothing it serves is speculative until it is fixed. "
        "eagle3-top preflight on the same model directories says whether a known defect of the release explains it",
        engine_error=h.engine_error, brief=f"the engine crashed: {h.engine_error}",
    )  # fmt: skip


def expected_accept_length(hello: Hello, manifest: Manifest | None) -> tuple[float | None, str]:
    """What the draft should reach on this server, and who says so: the manifest's training
    metrics, else the draft directory's own claims carried by the hello. With per-position
    accuracies and the server's effective draft steps, the expectation is the chain's for that many
    steps (a server run with fewer steps than training cannot reach training's figure)."""
    acc: list[float] = []
    sim: float | None = None
    who = ""
    if manifest is not None and manifest.training is not None:
        acc, sim, who = (
            list(manifest.training_acc),
            manifest.training.simulated_acc_len,
            "the manifest's training metrics",
        )
    elif hello.claims is not None:
        acc, sim = list(hello.claims.acc or []), hello.claims.simulated_acc_len
        who = f"the draft's own {hello.claims.source or 'metrics'}"
    eff = hello.effective
    steps = None
    if eff is not None:
        steps = eff.num_steps if eff.num_steps is not None else None
        if steps is None and eff.num_draft_tokens is not None and (eff.topk or 1) == 1:
            steps = eff.num_draft_tokens - 1
    if acc and steps is not None and steps >= 0:
        return 1.0 + float(np.sum(np.cumprod(acc[:steps]))), who
    if sim is not None:
        return sim + 1.0, who
    return None, ""


def _accept_length(
    ev: SourceEvidence, hello: Hello, manifest: Manifest | None, add: Add, th: Thresholds
) -> None:
    expected, who = expected_accept_length(hello, manifest)
    s = ev.acceptance
    measured = s.mean_accept_length
    if measured is None or s.request_steps < th.min_request_steps:
        return
    if expected is None:
        if measured < th.low_accept_length:
            add(
                "ACCEPT_LENGTH_LOW", WARNING,
                f"accept length {measured:.2f} over {s.request_steps} request-steps: speculation "
                "likely costs more than it saves (no training metrics to compare with)",
                "give check the training manifest (--manifest), or put the draft's "
                "training_metrics.json beside its config.json, to judge against training",
                measured=round(measured, 4), request_steps=s.request_steps,
                brief=f"accept length {measured:.2f}",
            )  # fmt: skip
        return
    low = low_accept_threshold(expected, hello.effective.num_draft_tokens if hello.effective else None)
    if measured < low:
        add(
            "ACCEPT_LENGTH_FAR_BELOW_EXPECTED", ERROR,
            f"accept length {measured:.2f} over {s.request_steps} request-steps, far below the "
            f"{expected:.2f} that {who} claims (threshold {low:.2f})",
            "no wiring finding explains it: replay training samples through the server (eagle3-top "
            "probe) to tell wiring from generalisation, and run eagle3-top preflight on the served "
            "model directories for what the release does with them",
            measured=round(measured, 4), expected=round(expected, 4), threshold=round(low, 4),
            request_steps=s.request_steps, claimed_by=who,
            brief=f"accept length {measured:.2f} against {expected:.2f} expected",
        )  # fmt: skip


def _algorithm(hello: Hello, manifest: Manifest | None, add: Add) -> None:
    draft_arch = hello.model.draft_arch or (manifest.draft.arch if manifest is not None else None)
    if hello.algorithm == "EAGLE" and draft_arch and "eagle3" in draft_arch.lower():
        add(
            "ALGORITHM_MISMATCH", ERROR,
            f"EAGLE-3 draft ({draft_arch}) served with --speculative-algorithm EAGLE: the target feeds "
            "its final hidden state and the draft skips fc",
            "serve with --speculative-algorithm EAGLE3",
            algorithm=hello.algorithm, draft_arch=draft_arch,
        )  # fmt: skip


def _rewrites(hello: Hello, add: Add) -> None:
    for rw in hello.rewrites:
        if rw.old is None or hello.requested is None or hello.requested.get(rw.param) is None:
            continue  # a value the server chose where none was asked for: shown in the UI, not a finding
        add(
            "SPEC_PARAM_REWRITTEN", ERROR,
            f"{rw.param} {rw.old} → {rw.new}: {rw.reason}",
            f"request what the server will run (e.g. --speculative-{rw.param.replace('_', '-')} {rw.new}) "
            "or change the flag that forces it",
            **rw.to_body(),
        )  # fmt: skip


def _title(engine: Engine | None, hello: Hello) -> str:
    return engine.title if engine is not None else (hello.engine or "the server")


def _family(engine: Engine | None, hello: Hello) -> str:
    aux = hello.aux
    if aux is not None and aux.family:
        return aux.family
    return engine.family(hello.model.arch) if engine is not None else ""


def _ids_fix(engine: Engine | None, hello: Hello, canonical: Sequence[int] | None, what: str) -> str:
    """Where and what to write so that ``engine`` serves ``canonical``, checked by its own rules."""
    if engine is None:
        return f"put the layer ids where {hello.engine or 'the server'} reads them ({what})"
    if canonical is None:
        return f"put the ids the draft was trained on in the draft's config.json as {engine.ids_key}"
    return fix_ids(engine, _family(engine, hello), canonical, hello.model.num_layers)


def _ids_not_read(
    hello: Hello, engine: Engine | None, aux: AuxWiring, manifest: Manifest | None, add: Add
) -> None:
    if aux.use_aux_hidden_state is False or aux.ids_read is not None or not aux.ids_read_known:
        return
    n = hello.model.num_layers
    title = _title(engine, hello)
    default = engine.default_native(_family(engine, hello), n) if (engine is not None and n) else None
    harmless = manifest is not None and aux.capture_canonical == manifest.concat_order
    # Without a manifest the draft's own config is the evidence: ids it declares at the top level
    # that differ from what the server captures instead are a mis-wiring, not a guess.
    contradicted = (
        manifest is None
        and aux.declared_ids is not None
        and aux.capture_canonical is not None
        and sorted(set(aux.declared_ids)) != sorted(set(aux.capture_canonical))
    )
    where = engine.ids_key if engine is not None else "where the server reads them"
    detail = (
        f"ids {_fmt(aux.declared_ids)} found at the config's {str(aux.ids_location).replace('_', ' ')}, "
        f"where {title} does not read them (it reads {where})"
        if aux.declared_ids is not None
        else f"the draft config has no {where}"
    )
    trained = manifest.concat_order if manifest is not None else aux.declared_ids
    add(
        "LAYER_IDS_NOT_READ", INFO if harmless else (ERROR if manifest is not None or contradicted else WARNING),
        f"{title} fell back to its default capture layers {_fmt(default) if default else ''} (native): {detail}",
        _ids_fix(engine, hello, trained, "the draft's config.json"),
        served_native=aux.capture_native, declared_ids=aux.declared_ids, ids_location=aux.ids_location,
    )  # fmt: skip


def served_defects(hello: Hello | None) -> list[KnownDefect]:
    """The known defects of the serving release that its target and the ids it read run into."""
    if hello is None or hello.aux is None:
        return []
    engine = engines.engine(hello.engine)
    if engine is None:
        return []
    aux = hello.aux
    ids = aux.ids_read if aux.ids_read_known else aux.capture_canonical
    return engine.known_defects(hello.engine_version, hello.model.arch, ids, hello.model.num_layers)


def describe_defect(d: KnownDefect, hello: Hello) -> str:
    """One line: what this release does, and which releases do it."""
    engine = engines.engine(d.engine)
    title = engine.title if engine is not None else d.engine
    newest = engine.supported[1] if engine is not None and engine.supported else None
    if d.fixed_in:
        fixed = f"fixed in {version_text(d.fixed_in)}"
    elif newest is not None and d.last[: len(newest)] >= newest:
        fixed = "not fixed in any release observed"
    else:
        fixed = "later releases not observed with this target"
    return f"{title} {hello.engine_version} with a {d.architecture} target: {d.effect} (releases {d.releases}; {fixed})"


def defect_fix(d: KnownDefect, hello: Hello, trained: list[int] | None) -> str:
    """The way out of a release defect: the release that fixes it, or layers that avoid its case."""
    engine = engines.engine(d.engine)
    title = engine.title if engine is not None else d.engine
    if d.case in ("distinct", "default", "top_level"):  # every list of ids: no retraining avoids it
        if d.fixed_in:
            return f"upgrade {title} to {version_text(d.fixed_in)} or later (no choice of layers avoids it)"
        return f"no {title} release observed serves this architecture's aux capture right: serve the draft on another engine, or without speculation"
    upgrade = f"upgrade {title} to {version_text(d.fixed_in)} or later, or " if d.fixed_in else ""
    avoid = _avoiding(trained, d.case, hello.model.num_layers) if trained else None
    instead = (
        f"layers that avoid it (e.g. {_fmt(avoid)} instead of {_fmt(trained)})"
        if avoid is not None and avoid != trained
        else "layers that avoid it"
    )
    return f"{upgrade}retrain the draft on {instead}"


def _avoiding(trained: list[int], case: str, num_layers: int | None) -> list[int]:
    """The trained list changed as little as possible so that it no longer falls under ``case``."""
    if case == "out_of_order":
        return sorted(trained)
    ids = list(dict.fromkeys(trained)) if case == "duplicate" else list(trained)
    bad = {"embedding": -1, "last_layer": (num_layers - 1) if num_layers else None, "first_one": 1}.get(case)
    step = -1 if case == "last_layer" else 1
    out: list[int] = []
    for t in ids:
        if t == bad:
            k = t + step
            while k in ids or k in out:
                k += step
            t = k
        out.append(t)
    while len(out) < len(trained):  # a duplicate dropped: the next free layer instead
        k = max(out) + 1
        while k in out:
            k += 1
        out.append(k)
    return sorted(out)


def _values_cause(
    hello: Hello | None, layers: Sequence[int | None], trained: list[int]
) -> tuple[list[KnownDefect], str, str]:
    """For slots whose layer is right but whose values are not: the serving release's known defects
    of the "values" kind, the text that names them (appended to a message) and the fix."""
    defects = [d for d in served_defects(hello) if d.symptom == "values"]
    if hello is None or not defects or not any(lay is not None for lay in layers):
        return (
            [],
            "",
            (
                "the layer ids are right, so look at what fills them: serve the trained target checkpoint "
                "(same weights, dtype, quantisation), and check that nothing changes the captured tensors after capture"
            ),
        )
    cause = "".join("; " + describe_defect(d, hello) for d in defects)
    return defects, cause, defect_fix(defects[0], hello, trained)


def _trained_layers(hello: Hello, manifest: Manifest | None) -> list[int] | None:
    """The layers the draft was trained on: the manifest's, else the ones the server captures."""
    if manifest is not None:
        return manifest.concat_order
    return hello.aux.capture_canonical if hello.aux is not None else None


def defect_finding(d: KnownDefect, hello: Hello, manifest: Manifest | None, source: str) -> Finding:
    """``ENGINE_KNOWN_DEFECT`` for one defect of the serving release."""
    return Finding(
        "ENGINE_KNOWN_DEFECT", ERROR,
        describe_defect(d, hello),
        defect_fix(d, hello, _trained_layers(hello, manifest)),
        source,
        {"defect": d.key, "releases": d.releases, "fixed_in": version_text(d.fixed_in) if d.fixed_in else None,
         "case": d.case, "symptom": d.symptom, "evidence": d.evidence},
    )  # fmt: skip


def _release_defects(hello: Hello, engine: Engine | None, manifest: Manifest | None, add: Add) -> None:
    for d in served_defects(hello):
        f = defect_finding(d, hello, manifest, "")
        add(f.code, f.severity, f.message, f.fix, **f.evidence)
    if engine is not None and hello.aux is not None:
        gap = engine.defects_coverage(hello.engine_version, hello.model.arch)
        if gap is not None and engine.supported is not None:
            add(
                "ENGINE_DEFECTS_UNKNOWN", INFO,
                f"release defects not checked: {gap}",
                f"run eagle3-top preflight where {engine.title} {hello.engine_version} is installed: it runs "
                "that release's own model classes on the CPU and reports what they do"
                if engine.observer is not None
                else "replay training samples through the server (eagle3-top probe): it compares the aux rows "
                "the draft is fed with training's, whatever the release does",
                coverage=gap,
            )  # fmt: skip


def _width(hello: Hello, aux: AuxWiring, add: Add) -> None:
    width, expected = aux.width, aux.expected_width
    if width is None or expected is None or width == expected:
        return
    if aux.use_aux_hidden_state is not False:
        add(
            "AUX_WIDTH_MISMATCH", ERROR,
            f"aux width {width} ({aux.slots} slots × {hello.model.hidden_size}) but the draft's fc expects {expected}"
            + (f": {aux.capture_note}" if aux.capture_note else ""),
            "make the layer ids distinct and ones the engine reaches "
            f"({aux.convention or 'its capture rule'}) so every slot is captured, "
            "and pair the draft with the target it was trained on",
            width=width, expected_width=expected, slots=aux.slots,
            brief=f"aux width {width} where the draft's fc expects {expected}",
        )  # fmt: skip
    else:  # the same silent fallback as ALGORITHM_MISMATCH, from one config key
        add(
            "AUX_WIDTH_MISMATCH", ERROR,
            "the draft config's eagle_config.use_aux_hidden_state is false: the target captures no aux "
            f"layers and feeds the draft its final hidden state ({width} wide), so the draft skips "
            f"its fc, which expects {expected}",
            "remove use_aux_hidden_state: false from the draft's eagle_config (an EAGLE-3 draft is "
            "trained on the aux layers)",
            width=width, expected_width=expected, use_aux_hidden_state=False,
        )  # fmt: skip


def _against_manifest(
    ev: SourceEvidence,
    hello: Hello,
    engine: Engine | None,
    aux: AuxWiring,
    manifest: Manifest,
    rows: tuple[SlotRow, ...],
    add: Add,
    th: Thresholds,
) -> None:
    trained = manifest.concat_order
    served, native = aux.capture_canonical, aux.capture_native
    eagle3 = hello.algorithm != "EAGLE"
    if served and eagle3:
        if sorted(set(served)) != sorted(set(trained)) or len(served) != len(trained):
            add(
                "LAYER_MAP_MISMATCH", ERROR,
                f"served layers {_fmt(served)} (canonical; engine-native {_fmt(native)}), "
                f"trained {_fmt(trained)}" + (f"; {aux.capture_note}" if aux.capture_note else ""),
                "serve the draft with the layers it was trained on: "
                + _ids_fix(engine, hello, trained, f"canonical {_fmt(trained)}"),
                served=served, trained=trained,
                brief=f"served layers {_fmt(served)} against trained {_fmt(trained)}",
            )  # fmt: skip
        elif served != trained:
            add(
                "LAYER_ORDER_MISMATCH", ERROR,
                f"same layers, different concatenation order: served {_fmt(served)}, trained {_fmt(trained)}",
                "list the layer ids in ascending order in training and serving (servers concatenate ascending)",
                served=served, trained=trained,
            )  # fmt: skip
    hidden = hello.model.hidden_size
    if hidden is not None and hidden != manifest.slot_width:
        add(
            "AUX_WIDTH_MISMATCH", ERROR,
            f"target hidden size {hidden}, the draft was trained on aux slots of width {manifest.slot_width}",
            "serve the draft with the target model it was trained on",
            hidden=hidden, trained_slot_width=manifest.slot_width,
        )  # fmt: skip
    elif aux.slots and aux.slots != len(trained) and eagle3:
        add(
            "AUX_WIDTH_MISMATCH", ERROR,
            f"{aux.slots} aux slots captured, the draft was trained on {len(trained)}",
            "make the layer ids distinct and reachable (below num_layers - 1) so every slot is captured",
            slots=aux.slots, trained_slots=len(trained),
            brief=f"{aux.slots} aux slots captured where training had {len(trained)}",
        )  # fmt: skip
    _drift(ev, hello, manifest, rows, add)
    _acceptance(ev, manifest, add, th)
    _vocab(hello, manifest, add)


def _drift(ev: SourceEvidence, hello: Hello, manifest: Manifest, rows: tuple[SlotRow, ...], add: Add) -> None:
    # A slot fed another layer than training's differs from training as a consequence, and the layer
    # findings name that. Drift is the finding for a slot whose layer is the trained one but whose
    # values are not.
    bad = [r for r in rows if r.stats_ok is False and r.layer_ok]
    if not bad:
        return
    desc = "; ".join(
        f"slot {r.slot} (layer {r.trained}) rms {r.rms_live:.3g} vs {r.rms_trained:.3g}, cos {r.cosine:.2f}"
        if r.cosine is not None
        else f"slot {r.slot} (layer {r.trained}) rms {r.rms_live:.3g} vs {r.rms_trained:.3g}"
        for r in bad
    )
    defects, cause, fix = _values_cause(hello, [r.trained for r in bad], manifest.concat_order)
    add(
        "AUX_STATS_DRIFT", ERROR,
        f"the layer map is right but the values are not: {desc}{cause}",
        fix,
        slots=[asdict(r) for r in bad], rows=ev.aux_merged.rows, defects=[d.key for d in defects],
        brief=f"the layer map is right but the values are not: {desc}",
    )  # fmt: skip


def _acceptance(ev: SourceEvidence, manifest: Manifest, add: Add, th: Thresholds) -> None:
    acc = manifest.training_acc
    s = ev.acceptance.summary(0.0)
    if not acc or s.request_steps < th.min_request_steps or not len(s.conditional):
        return
    low = [
        {"position": i + 1, "live": round(float(live_c), 3), "trained": round(train_c, 3)}
        for i, (live_c, train_c) in enumerate(zip(s.conditional, acc, strict=False))
        if live_c < train_c - th.accept_gap
    ]
    if low:
        desc = ", ".join(f"pos {d['position']}: {d['live']:.2f} vs {d['trained']:.2f}" for d in low)
        add(
            "ACCEPTANCE_BELOW_TRAINING", WARNING,
            f"conditional acceptance far below training acc_i ({desc}); mean accept length "
            f"{s.mean_accept_length:.2f}",
            "no wiring finding explains it: eagle3-top probe replays training samples through the server "
            "(aux rows as in training but low acceptance live: the draft does not generalise to this traffic)",
            positions=low, request_steps=s.request_steps, mean_accept_length=s.mean_accept_length,
            brief=f"conditional acceptance below training ({desc})",
        )  # fmt: skip


def _vocab(hello: Hello, manifest: Manifest, add: Add) -> None:
    for where, v in (("manifest", manifest.vocab), ("server", hello.vocab)):
        problem = vocab_problem(v, manifest.draft.draft_vocab_size)
        if problem:
            add(
                "VOCAB_MAP_INVALID", ERROR, f"d2t ({where}): {problem}",
                "regenerate the vocab mapping (d2t offsets, target = draft + d2t[draft]) from the training data",
                summary=None if v is None else v.to_body(),
            )  # fmt: skip
            return


def vocab_problem(v: VocabSummary | None, draft_vocab_size: int | None) -> str | None:
    if v is None:
        return None
    size, vocab = v.size, v.vocab_size
    if draft_vocab_size is not None and size != draft_vocab_size:
        return f"{size} entries, draft_vocab_size is {draft_vocab_size}"
    if (v.min_target or 0) < 0 or (vocab is not None and (v.max_target or 0) >= vocab):
        return f"maps into [{v.min_target}, {v.max_target}], outside the target vocabulary of {vocab}"
    if size is not None and v.unique_targets is not None and v.unique_targets < size:
        return f"{size - v.unique_targets} draft ids map to a target id already taken"
    if v.all_zero and vocab is not None and size is not None and size < vocab:
        return (
            "all offsets are zero (identity map onto the first draft_vocab_size tokens: an uninitialised d2t)"
        )
    return None


# -- probe exchanges -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeEvidence:
    """What a probe exchange saw: the slot comparisons and the acceptance on both sides of the fork."""

    source: str
    comparisons: Sequence[ProbeComparison]
    matrix: np.ndarray | None  # row-weighted over the comparisons; None = no aligned rows
    mapping: list[int | None]
    mapping_text: str
    aux_ok: bool  # every served slot matches its trained slot, in every comparison
    trained_layers: list[int]
    served_layers: list[int]
    probe_accept: float | None  # accept length on the training continuations
    live_accept: float | None  # accept length of other traffic meanwhile
    num_draft_tokens: int | None  # the server's effective verify width
    hello: Hello | None = None  # the server's, for its release's known defects


def _values_not_layers(
    pe: ProbeEvidence, manifest: Manifest | None, accept_txt: str, evid: dict[str, Any]
) -> tuple[str, Finding]:
    """The server captures the trained layers, in the trained order, yet some slots hold other
    values: setting the ids again would change nothing, so the finding says what does."""
    wrong = [i for i, m in enumerate(pe.mapping) if m != i]
    layers = [pe.trained_layers[i] for i in wrong if i < len(pe.trained_layers)]
    defects, cause, fix = _values_cause(pe.hello, layers, pe.trained_layers)
    slots = ", ".join(f"slot {i} (layer {pe.trained_layers[i]})" for i in wrong if i < len(pe.trained_layers))
    evid = {**evid, "wrong_slots": wrong, "defects": [d.key for d in defects]}
    return "wiring: the right layers are captured, but some slots hold other values", Finding(
        "PROBE_MISMATCH", ERROR,
        f"the layer map is right (served = trained = {_fmt(pe.trained_layers)}) but {slots or 'some slots'} "
        f"match no trained slot: {pe.mapping_text}{cause}; {accept_txt}",
        fix, pe.source, evid,
    )  # fmt: skip


def low_accept_threshold(expected: float | None, num_draft_tokens: int | None) -> float:
    """Accept length below which acceptance counts as low: halfway between 1 and the training
    expectation (accept length incl. bonus), or 40 % of the way to the verify width."""
    if expected is not None and expected > 1:
        return 1.0 + 0.5 * (expected - 1.0)
    n = num_draft_tokens if isinstance(num_draft_tokens, int) and num_draft_tokens > 1 else 4
    return 1.0 + 0.4 * (n - 1)


def judge_probe(pe: ProbeEvidence, manifest: Manifest | None) -> tuple[str, Finding]:
    """The verdict of a probe exchange and its finding: wiring (aux rows differ, or match yet
    acceptance is low on training's own samples), generalisation (high on training samples, low
    live), or healthy (``PROBE_OK``, info)."""
    # the expectation for the chain the server runs: one draft step cannot reach a 3-step figure
    expected = (
        expected_accept_length(pe.hello, manifest)[0]
        if pe.hello is not None
        else manifest.training.expected_accept_length
        if manifest is not None and manifest.training
        else None
    )
    low = low_accept_threshold(expected, pe.num_draft_tokens)
    probe_low = pe.probe_accept is not None and pe.probe_accept < low
    live_low = (
        pe.live_accept is not None
        and pe.probe_accept is not None
        and pe.live_accept < min(low, 0.8 * pe.probe_accept)
    )

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    live_txt = f"live {fmt(pe.live_accept)}" if pe.live_accept is not None else "no live traffic seen"
    accept_txt = f"accept length on training samples {fmt(pe.probe_accept)} ({live_txt}; low below {low:.2f})"
    evid: dict[str, Any] = {
        "matrix": None if pe.matrix is None else np.round(pe.matrix, 4).tolist(),
        "mapping": pe.mapping,
        "mapping_text": pe.mapping_text,
        "trained_layers": pe.trained_layers,
        "served_layers": pe.served_layers,
        "samples": len(pe.comparisons),
        "rows": sum(c.rows for c in pe.comparisons),
        "probe_accept_length": pe.probe_accept,
        "live_accept_length": pe.live_accept,
        "brief": f"replayed training samples: {pe.mapping_text}",
    }
    src = pe.source
    if not pe.aux_ok:
        if pe.served_layers and pe.served_layers == pe.trained_layers:
            return _values_not_layers(pe, manifest, accept_txt, evid)
        engine = engines.engine(pe.hello.engine) if pe.hello is not None else None
        ids = (
            _ids_fix(engine, pe.hello, manifest.concat_order, f"canonical {_fmt(manifest.concat_order)}")
            if manifest and pe.hello is not None
            else "put the ids it was trained on where the server reads them"
        )
        return "wiring: the draft is fed other hidden states than in training", Finding(
            "PROBE_MISMATCH", ERROR,
            f"replayed training samples: {pe.mapping_text}; {accept_txt}",
            f"serve the draft with the layers (and order) it was trained on: {ids}",
            src, evid,
        )  # fmt: skip
    if probe_low:
        return "wiring: aux rows match training, yet acceptance is low on the training samples themselves", Finding(
            "ACCEPTANCE_BELOW_TRAINING", ERROR,
            f"aux rows match training slot by slot, but {accept_txt}: not a generalisation problem",
            "check the rest of the draft's wiring: d2t vocabulary map, norm_before_fc/fc_norm, the draft weights and dtype",
            src, evid,
        )  # fmt: skip
    if live_low:
        return "generalisation: high acceptance on training data, low on live traffic", Finding(
            "ACCEPTANCE_BELOW_TRAINING", WARNING,
            f"aux rows match training and {accept_txt}: the draft does not generalise to this traffic",
            "train the draft on data closer to the live traffic (same chat template, domains, lengths)",
            src, evid,
        )  # fmt: skip
    verdict = "healthy: every served slot matches its trained slot" + (
        "" if pe.probe_accept is None else f"; {accept_txt}"
    )
    return verdict, Finding(
        "PROBE_OK", INFO, f"replayed training samples: {pe.mapping_text}; {accept_txt}", "", src, evid
    )
