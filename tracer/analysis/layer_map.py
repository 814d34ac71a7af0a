"""The layer map: slot by slot, the layer training concatenated against the one the server feeds,
and how far the live fingerprint of the slot is from training's. The drift finding and the
monitor's layer-map panel both read it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.schema import Fingerprint, Hello
from eagle3_top.tracer.serving.fingerprint import sketch_cosine

from .thresholds import DIRECTION_SNR, MIN_AUX_ROWS, SKETCH_COSINE_FLOOR, THRESHOLDS


@dataclass(frozen=True)
class SlotRow:
    """One aux slot, trained against served."""

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


def _coherence(fp: Fingerprint, i: int, width: int) -> float:
    """|mean row| / |typical row| of slot i, from the sketch (which preserves norms) and the RMS."""
    row_norm = fp.rms[i] * width**0.5
    return float(np.linalg.norm(fp.sketch[i])) / row_norm if row_norm > 0 else 0.0


def _direction_is_signal(live: Fingerprint, ref: Fingerprint, i: int, width: int) -> bool:
    """Whether the mean-row directions can be compared at all. Where rows share little direction
    (an embedding slot: every token points elsewhere) the mean of a few hundred rows is mostly
    noise, of size ~1/sqrt(rows) of a row; compare only where the mean stands well above that."""
    return min(_coherence(live, i, width), _coherence(ref, i, width)) * live.rows**0.5 >= DIRECTION_SNR


def layer_map(
    hello: Hello | None,
    live: Fingerprint | None,
    manifest: Manifest,
    rms_ratio_limit: float = THRESHOLDS.rms_ratio_limit,
) -> list[SlotRow]:
    """``live``: the source's aux fingerprints merged (``AuxEvidence.merged``)."""
    trained = manifest.concat_order
    served = (hello.aux.capture_canonical if hello is not None and hello.aux is not None else None) or []
    ref = manifest.reference.fingerprint
    enough = live is not None and live.rows >= MIN_AUX_ROWS and live.slots == ref.slots
    rows = []
    for i in range(max(len(trained), len(served))):
        t = trained[i] if i < len(trained) else None
        v = served[i] if i < len(served) else None
        rms_l = rms_t = cos = None
        stats_ok = None
        if enough and live is not None and i < ref.slots:
            rms_l, rms_t = live.rms[i], ref.rms[i]
            both = len(live.sketch) > i and len(ref.sketch) > i
            cos = sketch_cosine(live.sketch[i], ref.sketch[i]) if both else None
            ratio = (rms_l + 1e-12) / (rms_t + 1e-12)
            judged = cos is not None and _direction_is_signal(live, ref, i, manifest.slot_width)
            stats_ok = (1 / rms_ratio_limit <= ratio <= rms_ratio_limit) and (
                not judged or (cos is not None and cos >= SKETCH_COSINE_FLOOR)
            )
        rows.append(SlotRow(i, t, v, rms_l, rms_t, cos, t is not None and t == v, stats_ok))
    return rows
