"""``health``: the tracer's own counters, every second. Read tolerantly."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_top.tracer.schema.tolerant import Record


@dataclass(frozen=True)
class Health(Record):
    sent: int | None = None
    dropped: int | None = None  # events the publisher could not queue
    queue: int | None = None
    queue_max: int | None = None
    hook_errors: int | None = None
    discarded_rows: int | None = None  # step rows the engine threw away and the tracer left out
    encode_errors: int | None = None
    disabled: bool = False  # the tracer switched itself off after repeated errors
    paused: bool = False  # its pause file exists: nothing is recorded
    last_error: str | None = None  # the tracer's own last error (a hook, an encode)
    # The serving engine itself failed (an exception out of its forward): it is not serving.
    engine_error: str | None = None
    started: float | None = None  # the publisher's start (wall clock): a new value is a restart
    final: bool = False  # the publisher's last event: it is closing
    curve_refused: int | None = None  # CURVE handshakes the publisher refused (unadmitted keys)
    # The publisher's bound endpoint: a new pid on the same host, endpoint and rank is a restart
    endpoint: str | None = None
