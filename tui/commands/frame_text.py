"""One short line about a frame's body, for ``eagle3-top dump`` without ``--json``. The caller
makes the line safe for the terminal (every string in it came from the file)."""

from __future__ import annotations

from typing import Any

from eagle3_top.tracer.schema import (
    AUX,
    HEALTH,
    HELLO,
    PROBE,
    STEP,
    DecodeError,
    Event,
    Health,
    Hello,
    aux_view,
    probe_view,
    step_view,
)


def _hello(ev: Event) -> str:
    h = Hello.from_body(ev.body)
    parts = [f"engine {h.engine or '?'} {h.engine_version or ''}".rstrip()]
    if h.effective is not None:
        e = h.effective
        parts.append(
            f"{e.algorithm or '?'} steps {e.num_steps} topk {e.topk} draft tokens {e.num_draft_tokens}"
        )
    if h.aux is not None:
        read = h.aux.ids_read if h.aux.ids_read_known else "unknown"
        parts.append(f"aux ids declared {h.aux.declared_ids}, read {read}")
    if h.wiring_error:
        parts.append(f"wiring error: {h.wiring_error}")
    return "; ".join(parts)


def _step(ev: Event) -> str:
    v = step_view(ev)
    mean = f"{float(v.accept_lengths.mean()):.2f}" if v.batch else "-"
    return f"step {v.step}: batch {v.batch}, width {v.n}, accept length {mean}"


def _aux(ev: Event) -> str:
    a = aux_view(ev)
    fp = a.fingerprint
    return f"step {a.step} at {a.where or '?'}: {fp.rows} rows, {fp.slots} slots of {fp.slot_width}"


def _health(ev: Event) -> str:
    h = Health.from_body(ev.body)
    parts = [f"sent {h.sent}, dropped {h.dropped}, queue {h.queue}/{h.queue_max}"]
    flags: list[tuple[Any, str]] = [
        (h.engine_error, f"engine error: {h.engine_error}"), (h.last_error, f"last error: {h.last_error}"),
        (h.disabled, "tracer disabled"), (h.paused, "paused"), (h.final, "final"),
    ]  # fmt: skip
    parts += [text for on, text in flags if on]
    return "; ".join(parts)


def _probe(ev: Event) -> str:
    p = probe_view(ev.body)
    return f"{p.rid}: {p.rows} rows from position {p.offset}, {p.slots} slots of {p.slot_width}"


_SUMMARIES = {HELLO: _hello, STEP: _step, AUX: _aux, HEALTH: _health, PROBE: _probe}


def frame_summary(ev: Event) -> str:
    """What the body says, in a few words; ``malformed: why`` for a body its kind rejects."""
    fn = _SUMMARIES.get(ev.kind)
    if fn is None:
        return f"a kind this eagle3-top does not know, {len(ev.body)} keys"
    try:
        return fn(ev)
    except DecodeError as exc:
        return f"malformed: {exc}"
