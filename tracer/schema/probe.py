"""``probe``: the prefill aux rows of requests marked as probes (``PROBE_MARKER`` in the rid), so
that a training sample replayed through a server can be compared row by row with training's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from eagle3_top.tracer.schema.envelope import DecodeError
from eagle3_top.tracer.schema.step import TOKEN_DTYPE, rid_text

PROBE_MARKER = "e3t-probe"  # a request whose rid contains it is a probe
PROBE_AUX_DTYPE = np.dtype("<f2")


def is_probe_rid(rid: Any) -> bool:
    """True for a probe request (also after a server suffixes its rid, e.g. SGLang's ``rid_i``)."""
    return isinstance(rid, str) and PROBE_MARKER in rid


def probe_body(
    *, rid: str, rows: Any, slots: int, slot_width: int, offset: int, input_ids: Any
) -> dict[str, Any]:
    """A probe body from host arrays: ``rows`` [R, slots * slot_width], ``input_ids`` [R]."""
    aux = np.ascontiguousarray(np.asarray(rows, dtype=np.float32).reshape(-1, slots * slot_width))
    ids = np.ascontiguousarray(np.asarray(input_ids).reshape(-1), dtype=TOKEN_DTYPE)
    return {
        "rid": rid,
        "rows": int(aux.shape[0]),
        "slots": int(slots),
        "slot_width": int(slot_width),
        "offset": int(offset),
        "aux": aux.astype(PROBE_AUX_DTYPE).tobytes(),
        "input_ids": ids.tobytes(),
    }


@dataclass(frozen=True)
class ProbeRows:
    """The aux rows a server fed its draft for one probe request (one chunk, or chunks merged)."""

    rid: str
    offset: int  # first prompt position covered
    slots: int
    slot_width: int
    aux: np.ndarray  # [rows, slots * slot_width] float32
    input_ids: np.ndarray  # [rows] int32

    @property
    def rows(self) -> int:
        return int(self.aux.shape[0])


def probe_view(body: Mapping[str, Any]) -> ProbeRows:
    rid = body.get("rid")
    if not isinstance(rid, str):
        raise DecodeError("probe 'rid' is not a string")
    rid = rid_text(rid)  # shown in the probe panel and its notes, as a step's rids are
    vals = []
    for key in ("rows", "slots", "slot_width", "offset"):
        v = body.get(key)
        if type(v) is not int or v < 0:
            raise DecodeError(f"probe '{key}' is {v!r}, expected a non-negative integer")
        vals.append(v)
    rows, slots, width, offset = vals
    aux, ids = body.get("aux"), body.get("input_ids")
    if not isinstance(aux, (bytes, bytearray)) or len(aux) != rows * slots * width * PROBE_AUX_DTYPE.itemsize:
        raise DecodeError(f"probe 'aux' is not {rows}x{slots * width} float16 values")
    if not isinstance(ids, (bytes, bytearray)) or len(ids) != rows * TOKEN_DTYPE.itemsize:
        raise DecodeError(f"probe 'input_ids' is not {rows} int32 values")
    arr = np.frombuffer(aux, dtype=PROBE_AUX_DTYPE).astype(np.float32).reshape(rows, slots * width)
    return ProbeRows(rid, offset, slots, width, arr, np.frombuffer(ids, dtype=TOKEN_DTYPE))
