"""A source's state in words, the same in the sources table, ``--once`` and ``--once --json``."""

from __future__ import annotations

from collections.abc import Sequence

from .snapshot import SourceSnapshot

OK, QUIET, WARN, BAD = "ok", "quiet", "warn", "bad"


def source_state(src: SourceSnapshot, endpoints: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(words, level): the endpoint's state when it says something is wrong, else what the source
    itself says (engine failed, closed, dead, stale, tracer disabled or paused), else live."""
    if len(endpoints) == 1:
        ep_state = endpoints[0][1]
        if ep_state != "connected":
            return ep_state, BAD if "down" in ep_state or "fail" in ep_state else WARN
    health = src.health
    if health is not None and health.engine_error:
        return "engine failed", BAD
    if health is not None and health.final:
        return f"closed {src.age_s:.0f}s ago", QUIET
    if src.dead:
        return f"dead {src.age_s:.0f}s", BAD
    if src.stale:
        return f"stale {src.age_s:.0f}s", WARN
    if health is not None and health.disabled:
        return "tracer disabled", BAD
    if health is not None and health.paused:
        return "tracer paused", WARN  # the server side: nothing is recorded, unlike a frozen display
    return "live", OK
