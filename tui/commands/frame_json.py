"""A recorded frame as one JSON object (``eagle3-top dump --json``).

Columns are read as the protocol defines them: a step's ``draft``, ``parents``, ``accepted`` and
``tokens`` (little-endian int32) and a probe's ``input_ids`` (int32) and ``aux`` (float16) become
lists of numbers in their shape; any other bin, and a column whose length does not fit its shape,
is a hex string. Floats that JSON cannot hold are the strings ``NaN``, ``Infinity``, ``-Infinity``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from eagle3_top.tracer.reader.recording import RecordedFrame
from eagle3_top.tracer.schema import (
    PROBE,
    STEP,
    TOKEN_DTYPE,
    DecodeError,
    Event,
    probe_view,
    step_columns,
    step_view,
)

HEX_PREFIX = 64  # bytes of an undecodable frame shown


def plain(v: Any) -> Any:
    """Any value msgpack hands back, as a value ``json.dumps`` writes as strict JSON."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {k if isinstance(k, str) else str(plain(k)): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return str(v)  # msgpack extension types and timestamps


def _numbers(arr: np.ndarray) -> Any:
    out = arr.tolist()
    return out if arr.dtype.kind in "iu" or np.isfinite(arr).all() else plain(out)


def _step(ev: Event) -> tuple[dict[str, Any], str | None]:
    b = ev.body
    out = plain(b)
    try:
        step_columns(b)  # the shapes: past this, every column has exactly the bytes its shape needs
    except DecodeError as exc:
        return out, str(exc)
    batch, n = b["batch"], b["n"]
    for key, shape in (
        ("draft", (batch, n)),
        ("parents", (batch, n)),
        ("accepted", (batch,)),
        ("tokens", (-1,)),
    ):
        if b.get(key) is not None:
            out[key] = _numbers(np.frombuffer(b[key], dtype=TOKEN_DTYPE).reshape(shape))
    try:
        step_view(ev)  # the values: accepted counts in range, tokens adding up
    except DecodeError as exc:
        return out, str(exc)
    return out, None


def _probe(ev: Event) -> tuple[dict[str, Any], str | None]:
    out = plain(ev.body)
    try:
        rows = probe_view(ev.body)
    except DecodeError as exc:
        return out, str(exc)
    out["aux"] = _numbers(rows.aux)  # float16 on the wire, widened exactly to float32
    out["input_ids"] = _numbers(rows.input_ids)
    return out, None


def body_json(ev: Event) -> tuple[dict[str, Any], str | None]:
    """The body (envelope keys left out), and why it is not a valid one of its kind (None if it is)."""
    if ev.kind == STEP:
        return _step(ev)
    if ev.kind == PROBE:
        return _probe(ev)
    return plain(ev.body), None


def frame_json(rec: RecordedFrame, ev: Event | None, why: str) -> dict[str, Any]:
    """One object per frame; ``ev`` None for a frame that does not decode (``why`` says why)."""
    out: dict[str, Any] = {
        "log_time_ns": rec.log_time_ns,
        "publish_time_ns": rec.publish_time_ns,
        "source": ev.src if ev is not None else rec.topic,
        "endpoint": rec.endpoint,
        "kind": ev.kind if ev is not None else "undecodable",
        "seq": ev.seq if ev is not None else None,
        "ts": ev.ts if ev is not None else None,
        "body": None,
        "length": len(rec.data),
    }
    if ev is None:
        out["hex"] = rec.data[:HEX_PREFIX].hex()
        out["error"] = why
        return out
    out["body"], error = body_json(ev)
    if error is not None:
        out["error"] = error
    return out
