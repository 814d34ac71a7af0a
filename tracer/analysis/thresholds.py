"""The margins the findings engine judges by. Defaults are wide, so that a healthy server stays
quiet; a config file's ``[thresholds]`` table (README, "Configuration") changes them for the
monitor and for ``check``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

# Fixed margins (not in the config file): evidence needed before a slot's statistics are judged, the
# sketch cosine under which a slot's direction is wrong, and how far above noise a slot's mean row
# must stand before its direction is compared at all.
MIN_AUX_ROWS = 256
SKETCH_COSINE_FLOOR = 0.5
DIRECTION_SNR = 5.0


@dataclass(frozen=True)
class Thresholds:
    # Request-steps needed before acceptance is compared with anything.
    min_request_steps: int = 200
    # Conditional acceptance at a position this far (absolute) below training's acc_i: a finding.
    accept_gap: float = 0.25
    # Without any expectation: an accept length this low rarely pays for drafting and verifying.
    low_accept_length: float = 1.5
    # A slot's live RMS off training's by more than this factor (either way): drift.
    rms_ratio_limit: float = 3.0
    # The monitor: a source silent this long is shown stale.
    stale_after_s: float = 3.0
    # The monitor: a position's served rate this far below training's acc_i is drawn red.
    acc_mark_gap: float = 0.2

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)) or not 0 < v < float("inf"):
                raise ValueError(f"threshold {f.name} = {v!r}: expected a positive number")
        if self.rms_ratio_limit <= 1:
            raise ValueError(f"threshold rms_ratio_limit = {self.rms_ratio_limit}: expected more than 1")
        if not 1 < self.low_accept_length:
            raise ValueError(f"threshold low_accept_length = {self.low_accept_length}: expected more than 1")

    @classmethod
    def from_table(cls, table: Mapping[str, Any], base: Thresholds | None = None) -> Thresholds:
        """The defaults (or ``base``) with a config table's values; an unknown key is an error
        (a typo must not silently leave a gate at its default)."""
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise ValueError(f"unknown threshold(s) {', '.join(unknown)} (known: {', '.join(known)})")
        values = {}
        for k, v in table.items():
            if k == "min_request_steps" and not (isinstance(v, int) and not isinstance(v, bool)):
                raise ValueError(f"threshold min_request_steps = {v!r}: expected a whole number")
            values[k] = v
        return replace(base or cls(), **values)


THRESHOLDS = Thresholds()
