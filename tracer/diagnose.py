"""Findings: the stream of one source (hello, aux, step) plus a training manifest, judged.

Every finding has a stable code (DESIGN.md §6), a severity, the evidence and the fix in one
sentence. Structural findings (layers, widths, flags) need only the hello; statistical ones
(``AUX_STATS_DRIFT``, ``ACCEPTANCE_BELOW_TRAINING``) wait for enough evidence and use wide
margins, so that a healthy server stays quiet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .acceptance import AcceptanceStats
from .events import AUX, HELLO, STEP, Event, lookup, step_view
from .fingerprint import sketch_cosine
from .layers import sglang_default_capture
from .manifest import Manifest

ERROR, WARNING, INFO = "error", "warning", "info"

# Evidence needed before statistical findings may fire.
MIN_AUX_ROWS = 256
MIN_REQUEST_STEPS = 200
# Margins: a slot's RMS off by more than this factor, or its direction sketch below this cosine.
RMS_RATIO_LIMIT = 3.0
SKETCH_COSINE_FLOOR = 0.5
# ... and only where the slot's mean row stands this many noise levels above zero (see _direction_is_signal).
DIRECTION_SNR = 5.0
# Conditional acceptance at a position this far (absolute) below training's acc_i.
ACCEPT_GAP = 0.25


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    message: str
    fix: str
    source: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class AuxEvidence:
    """Aux fingerprints of one source merged over time, weighted by rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.samples = 0
        self.slots = 0
        self._sum: dict[str, np.ndarray] = {}

    def add(self, body: dict[str, Any]) -> None:
        rows = int(body.get("rows") or 0)
        slots = int(body.get("slots") or 0)
        if rows <= 0 or slots <= 0:
            return
        if slots != self.slots:  # layout changed (restart): start over
            self.__init__()  # type: ignore[misc]
            self.slots = slots
        for key in ("mean", "rms", "absmax"):
            vals = np.asarray(body.get(key, [0.0] * slots), dtype=np.float64)
            if key == "rms":
                vals = vals**2  # merge mean squares, not roots
            if key == "absmax":
                self._sum[key] = np.maximum(self._sum.get(key, vals), vals)
            else:
                self._sum[key] = self._sum.get(key, 0) + vals * rows
        sketch = np.asarray(body.get("sketch", []), dtype=np.float64)
        if sketch.ndim == 2 and sketch.shape[0] == slots:
            self._sum["sketch"] = self._sum.get("sketch", 0) + sketch * rows
        self.rows += rows
        self.samples += 1

    def fields(self) -> dict[str, Any] | None:
        if not self.rows:
            return None
        out: dict[str, Any] = {"rows": self.rows, "slots": self.slots}
        out["mean"] = (self._sum["mean"] / self.rows).tolist()
        out["rms"] = np.sqrt(self._sum["rms"] / self.rows).tolist()
        out["absmax"] = self._sum["absmax"].tolist()
        if "sketch" in self._sum:
            out["sketch"] = (self._sum["sketch"] / self.rows).tolist()
        return out


class SourceEvidence:
    """Everything the diagnosis needs about one source, fed event by event."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.hello: dict[str, Any] | None = None
        self.aux = AuxEvidence()
        self.acceptance = AcceptanceStats()
        self.steps = 0

    def add(self, ev: Event) -> None:
        if ev.kind == HELLO:
            self.hello = ev.body
        elif ev.kind == AUX:
            self.aux.add(ev.body)
        elif ev.kind == STEP:
            view = step_view(ev)
            self.acceptance.add(view.accepted, view.n, ev.ts)
            self.steps += 1


def _fmt(ids: Any) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]" if isinstance(ids, (list, tuple)) else str(ids)


@dataclass(frozen=True)
class SlotRow:
    """One aux slot, trained against served, for the layer-map panel and the drift finding."""

    slot: int
    trained: int | None  # canonical layer in training, None = no such slot
    served: int | None  # canonical layer served, None = not captured
    rms_live: float | None
    rms_trained: float | None
    cosine: float | None  # sketch cosine, live vs training
    layer_ok: bool
    stats_ok: bool | None  # None = not enough evidence yet

    @property
    def ok(self) -> bool:
        return self.layer_ok and self.stats_ok is not False


def _coherence(fields: dict[str, Any], i: int, width: int) -> float:
    """|mean row| / |typical row| of slot i, from the sketch (which preserves norms) and the RMS."""
    row_norm = float(fields["rms"][i]) * width**0.5
    return float(np.linalg.norm(fields["sketch"][i])) / row_norm if row_norm > 0 else 0.0


def _direction_is_signal(live: dict[str, Any], ref: dict[str, Any], i: int, rows: int, width: int) -> bool:
    """Whether the mean-row directions can be compared at all. Where rows share little direction
    (an embedding slot: every token points elsewhere) the mean of a few hundred rows is mostly
    noise, of size ~1/sqrt(rows) of a row; compare only where the mean stands well above that."""
    return min(_coherence(live, i, width), _coherence(ref, i, width)) * rows**0.5 >= DIRECTION_SNR


def layer_map(
    hello: dict[str, Any] | None, live: dict[str, Any] | None, live_rows: int, manifest: Manifest
) -> list[SlotRow]:
    """Slot by slot: the trained layer, the served one, and how far the live fingerprint is."""
    trained = manifest.concat_order
    served = lookup(hello, "aux", "capture_canonical")
    served = served if isinstance(served, list) else []
    ref = manifest.reference
    rows = []
    enough = live is not None and live_rows >= MIN_AUX_ROWS and live.get("slots") == len(ref["rms"])
    for i in range(max(len(trained), len(served))):
        t = trained[i] if i < len(trained) else None
        v = served[i] if i < len(served) else None
        rms_l = rms_t = cos = None
        stats_ok = None
        if enough and live is not None and i < len(ref["rms"]):
            rms_l, rms_t = float(live["rms"][i]), float(ref["rms"][i])
            cos = (
                sketch_cosine(live["sketch"][i], ref["sketch"][i])
                if "sketch" in live and "sketch" in ref
                else None
            )
            ratio = (rms_l + 1e-12) / (rms_t + 1e-12)
            judged = cos is not None and _direction_is_signal(live, ref, i, live_rows, manifest.slot_width)
            stats_ok = (1 / RMS_RATIO_LIMIT <= ratio <= RMS_RATIO_LIMIT) and (
                not judged or (cos is not None and cos >= SKETCH_COSINE_FLOOR)
            )
        rows.append(SlotRow(i, t, v, rms_l, rms_t, cos, t is not None and t == v, stats_ok))
    return rows


def diagnose(ev: SourceEvidence, manifest: Manifest | None = None) -> list[Finding]:
    out: list[Finding] = []
    hello = ev.hello
    if hello is None:
        return out
    src = ev.src

    def add(code: str, severity: str, message: str, fix: str, **evidence: Any) -> None:
        out.append(Finding(code, severity, message, fix, src, evidence))

    algo = lookup(hello, "spec", "effective", "algorithm")
    draft_arch = lookup(hello, "model", "draft_arch") or (manifest and lookup(manifest.data, "draft", "arch"))
    if algo == "EAGLE" and isinstance(draft_arch, str) and "eagle3" in draft_arch.lower():
        add(
            "ALGORITHM_MISMATCH", ERROR,
            f"EAGLE-3 draft ({draft_arch}) served with --speculative-algorithm EAGLE: the target feeds "
            "its final hidden state and the draft skips fc",
            "serve with --speculative-algorithm EAGLE3",
            algorithm=algo, draft_arch=draft_arch,
        )  # fmt: skip

    rewrites = lookup(hello, "spec", "rewrites")
    for rw in rewrites if isinstance(rewrites, list) else []:
        if not isinstance(rw, dict):
            continue
        if rw.get("from") is None or lookup(hello, "spec", "requested", str(rw.get("param"))) is None:
            continue  # a value the server chose where none was asked for: shown in the UI, not a finding
        add(
            "SPEC_PARAM_REWRITTEN", ERROR,
            f"{rw.get('param')} {rw.get('from')} → {rw.get('to')}: {rw.get('reason')}",
            f"request what the server will run (e.g. --speculative-{str(rw.get('param')).replace('_', '-')} "
            f"{rw.get('to')}) or change the flag that forces it",
            **rw,
        )  # fmt: skip

    aux = lookup(hello, "aux") or {}
    served = aux.get("capture_canonical")
    native = aux.get("capture_native")
    use_aux = aux.get("use_aux_hidden_state", True)
    ids_read = aux.get("ids_read")
    num_layers = lookup(hello, "model", "num_layers")
    if use_aux and algo != "EAGLE" and ids_read is None and "ids_read" in aux:
        declared = aux.get("declared_ids")
        where = aux.get("ids_location")
        default = sglang_default_capture(num_layers) if isinstance(num_layers, int) else None
        harmless = manifest is not None and isinstance(served, list) and served == manifest.concat_order
        detail = (
            f"ids {_fmt(declared)} found at the config's top level, where SGLang does not read them"
            if where == "top_level" and declared is not None
            else "the draft config has no eagle_config.eagle_aux_hidden_state_layer_ids"
        )
        add(
            "LAYER_IDS_NOT_READ", INFO if harmless else (ERROR if manifest is not None else WARNING),
            f"server fell back to its default capture layers {_fmt(default)} (native): {detail}",
            "nest eagle_aux_hidden_state_layer_ids under eagle_config in the draft's config.json",
            served_native=native, declared_ids=declared, ids_location=where,
        )  # fmt: skip

    width, expected = aux.get("width"), aux.get("expected_width")
    if algo != "EAGLE" and isinstance(width, int) and isinstance(expected, int) and width != expected:
        hidden = lookup(hello, "model", "hidden_size")
        if use_aux:
            add(
                "AUX_WIDTH_MISMATCH", ERROR,
                f"aux width {width} ({aux.get('slots')} slots × {hidden}) but the draft's fc expects {expected}",
                "make the layer ids distinct and below num_layers - 1 so every slot is captured, "
                "and pair the draft with the target it was trained on",
                width=width, expected_width=expected, slots=aux.get("slots"),
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

    if manifest is not None:
        _against_manifest(ev, manifest, add, served, native)
    return out


def _against_manifest(ev: SourceEvidence, manifest: Manifest, add: Any, served: Any, native: Any) -> None:
    hello = ev.hello or {}
    trained = manifest.concat_order
    algo = lookup(hello, "spec", "effective", "algorithm")
    if isinstance(served, list) and algo != "EAGLE" and served:
        if sorted(set(served)) != sorted(set(trained)) or len(served) != len(trained):
            add(
                "LAYER_MAP_MISMATCH", ERROR,
                f"served layers {_fmt(served)} (canonical; engine-native {_fmt(native)}), "
                f"trained {_fmt(trained)}",
                "serve the draft with the layers it was trained on: put "
                f"eagle_config.eagle_aux_hidden_state_layer_ids = {_fmt(manifest.layer_ids)} in the draft's config.json",
                served=served, trained=trained,
            )  # fmt: skip
        elif served != trained:
            add(
                "LAYER_ORDER_MISMATCH", ERROR,
                f"same layers, different concatenation order: served {_fmt(served)}, trained {_fmt(trained)}",
                "list the layer ids in ascending order in training and serving (servers concatenate ascending)",
                served=served, trained=trained,
            )  # fmt: skip
    slots = lookup(hello, "aux", "slots")
    hidden = lookup(hello, "model", "hidden_size")
    if isinstance(hidden, int) and hidden != manifest.slot_width:
        add(
            "AUX_WIDTH_MISMATCH", ERROR,
            f"target hidden size {hidden}, the draft was trained on aux slots of width {manifest.slot_width}",
            "serve the draft with the target model it was trained on",
            hidden=hidden, trained_slot_width=manifest.slot_width,
        )  # fmt: skip
    elif isinstance(slots, int) and slots and slots != len(trained) and algo != "EAGLE":
        add(
            "AUX_WIDTH_MISMATCH", ERROR,
            f"{slots} aux slots captured, the draft was trained on {len(trained)}",
            "make the layer ids distinct and reachable (below num_layers - 1) so every slot is captured",
            slots=slots, trained_slots=len(trained),
        )  # fmt: skip

    bad = [r for r in layer_map(hello, ev.aux.fields(), ev.aux.rows, manifest) if r.stats_ok is False]
    if bad:
        desc = "; ".join(
            f"slot {r.slot} (trained layer {r.trained}) rms {r.rms_live:.3g} vs {r.rms_trained:.3g}, cos {r.cosine:.2f}"
            if r.cosine is not None
            else f"slot {r.slot} rms {r.rms_live:.3g} vs {r.rms_trained:.3g}"
            for r in bad
        )
        add(
            "AUX_STATS_DRIFT", ERROR,
            f"live aux states differ from training: {desc}",
            "check that the server captures the trained layers of the trained target (same weights, dtype, quantisation)",
            slots=[asdict(r) for r in bad], rows=ev.aux.rows,
        )  # fmt: skip

    acc = manifest.training_acc
    s = ev.acceptance.summary(0.0)
    if acc and s.request_steps >= MIN_REQUEST_STEPS and len(s.conditional):
        low = []
        for i, (live_c, train_c) in enumerate(zip(s.conditional, acc, strict=False)):
            if live_c < train_c - ACCEPT_GAP:
                low.append({"position": i + 1, "live": round(float(live_c), 3), "trained": round(train_c, 3)})
        if low:
            desc = ", ".join(f"pos {d['position']}: {d['live']:.2f} vs {d['trained']:.2f}" for d in low)
            add(
                "ACCEPTANCE_BELOW_TRAINING", WARNING,
                f"conditional acceptance far below training acc_i ({desc}); mean accept length "
                f"{s.mean_accept_length:.2f}",
                "fix any wiring finding first; if there is none, the draft does not generalise to this traffic",
                positions=low, request_steps=s.request_steps, mean_accept_length=s.mean_accept_length,
            )  # fmt: skip

    vocab = manifest.data.get("vocab")
    live_vocab = lookup(hello, "vocab")
    for where, v in (("manifest", vocab), ("server", live_vocab)):
        problem = vocab_problem(v, manifest.data.get("draft", {}).get("draft_vocab_size"))
        if problem:
            add(
                "VOCAB_MAP_INVALID", ERROR, f"d2t ({where}): {problem}",
                "regenerate the vocab mapping (d2t offsets, target = draft + d2t[draft]) from the training data",
                summary=v,
            )  # fmt: skip
            break


def vocab_problem(v: Any, draft_vocab_size: Any) -> str | None:
    if not isinstance(v, dict):
        return None
    size, vocab = v.get("size"), v.get("vocab_size")
    if isinstance(draft_vocab_size, int) and size != draft_vocab_size:
        return f"{size} entries, draft_vocab_size is {draft_vocab_size}"
    if v.get("min_target", 0) < 0 or (isinstance(vocab, int) and v.get("max_target", 0) >= vocab):
        return f"maps into [{v.get('min_target')}, {v.get('max_target')}], outside the target vocabulary of {vocab}"
    if isinstance(size, int) and v.get("unique_targets", size) < size:
        return f"{size - v['unique_targets']} draft ids map to a target id already taken"
    if v.get("all_zero") and isinstance(vocab, int) and isinstance(size, int) and size < vocab:
        return (
            "all offsets are zero (identity map onto the first draft_vocab_size tokens: an uninitialised d2t)"
        )
    return None


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == ERROR for f in findings)
