"""``aux``: sampled fingerprints of the aux hidden states the draft consumed, per slot. The same
``Fingerprint`` holds training's reference in a manifest, so live and training numbers compare."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle3_top.tracer.schema.envelope import DecodeError, Event
from eagle3_top.tracer.schema.text import printable

MAX_SLOTS = 1024
MAX_SKETCH = 256
MAX_ROWS = 1 << 48
# Statistics of fp16/bf16/fp32 activations; anything beyond is a corrupt or hostile frame, and
# would overflow the row-weighted merge.
MAX_STAT = 1e30


def _floats(v: Any, n: int | None, key: str) -> tuple[float, ...]:
    if not isinstance(v, (list, tuple)) or len(v) > MAX_SLOTS:
        raise DecodeError(f"aux '{key}' is not a list of at most {MAX_SLOTS} numbers")
    if n is not None and len(v) != n:
        raise DecodeError(f"aux '{key}' has {len(v)} values, expected one per slot ({n})")
    out = []
    for x in v:
        if (
            not isinstance(x, (int, float)) or isinstance(x, bool) or not -MAX_STAT <= x <= MAX_STAT
        ):  # NaN fails
            raise DecodeError(f"aux '{key}' holds {str(x)[:40]!r}, expected finite numbers")
        out.append(float(x))
    return tuple(out)


def _counts(v: tuple[float, ...], key: str) -> tuple[int, ...]:
    if any(x < 0 or x != int(x) for x in v):
        raise DecodeError(f"aux '{key}' holds a value that is not a non-negative integer")
    return tuple(int(x) for x in v)


@dataclass(frozen=True)
class Fingerprint:
    """Per-slot statistics of aux hidden states: live ones in an aux event, training's in a manifest.

    ``mean``/``std``/``rms``/``absmax`` are over all finite rows of the slot; ``nan``/``inf`` count
    rows; ``sketch`` is each slot's mean row projected on 16 fixed directions.
    """

    rows: int
    slots: int
    slot_width: int
    mean: tuple[float, ...]
    rms: tuple[float, ...]
    std: tuple[float, ...] = ()
    absmax: tuple[float, ...] = ()
    nan: tuple[int, ...] = ()
    inf: tuple[int, ...] = ()
    sketch: tuple[tuple[float, ...], ...] = ()
    rows_total: int | None = None  # a GPU batch was sampled: ``rows`` evenly strided rows of these

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "rows": self.rows, "slots": self.slots, "slot_width": self.slot_width,
            "mean": list(self.mean), "std": list(self.std), "rms": list(self.rms),
            "absmax": list(self.absmax), "nan": list(self.nan), "inf": list(self.inf),
            "sketch": [list(s) for s in self.sketch],
        }  # fmt: skip
        if self.rows_total is not None and self.rows_total != self.rows:
            body["rows_total"] = self.rows_total
        return body

    @staticmethod
    def from_body(b: Mapping[str, Any]) -> Fingerprint:
        """Strict about what is there, lenient about what is optional (std, absmax, nan, inf,
        sketch; rows and width where a hand-made manifest leaves them out)."""
        mean = _floats(b.get("mean"), None, "mean")
        slots = b.get("slots", len(mean))
        rows, width = b.get("rows", 0), b.get("slot_width", 0)
        for key, v in (("slots", slots), ("rows", rows), ("slot_width", width)):
            if type(v) is not int or not 0 <= v <= MAX_ROWS:
                raise DecodeError(f"aux '{key}' is {str(v)[:40]!r}, expected a non-negative integer")
        if len(mean) != slots:
            raise DecodeError(f"aux 'mean' has {len(mean)} values, expected one per slot ({slots})")

        def opt(key: str) -> tuple[float, ...]:
            return _floats(b[key], slots, key) if b.get(key) is not None else ()

        sketch = b.get("sketch")
        rows_sk: tuple[tuple[float, ...], ...] = ()
        if sketch is not None:
            if not isinstance(sketch, list) or len(sketch) != slots:
                raise DecodeError("aux 'sketch' is not one list per slot")
            rows_sk = tuple(_floats(s, None, "sketch") for s in sketch)
            if len({len(r) for r in rows_sk}) > 1 or (rows_sk and len(rows_sk[0]) > MAX_SKETCH):
                raise DecodeError(f"aux 'sketch' rows differ in length or exceed {MAX_SKETCH}")
        total = b.get("rows_total")
        return Fingerprint(
            rows=rows, slots=slots, slot_width=width, mean=mean, rms=_floats(b.get("rms"), slots, "rms"),
            std=opt("std"), absmax=opt("absmax"),
            nan=_counts(opt("nan"), "nan"), inf=_counts(opt("inf"), "inf"),
            sketch=rows_sk, rows_total=total if type(total) is int else None,
        )  # fmt: skip


@dataclass(frozen=True)
class AuxSample:
    """An aux event: the fingerprint of the rows the draft consumed at one sampled step."""

    step: int
    where: str  # read point: fc_input (built-in engine), verify_aux (SGLang)
    fingerprint: Fingerprint


def aux_body(step: int, where: str, fingerprint: Fingerprint) -> dict[str, Any]:
    return {"step": step, "where": where, **fingerprint.to_body()}


def aux_view(ev: Event) -> AuxSample:
    step, where = ev.body.get("step", 0), ev.body.get("where", "")
    return AuxSample(
        step if type(step) is int else 0, printable(str(where), 64), Fingerprint.from_body(ev.body)
    )
