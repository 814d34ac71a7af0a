"""Findings: what the analysis reports, each with a stable code, a severity, the evidence and the
fix in one sentence. ``diagnose`` makes them; ``check``, ``probe`` and the monitor show them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

ERROR, WARNING, INFO = "error", "warning", "info"
_RANK = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass(frozen=True)
class Finding:
    code: str  # LAYER_MAP_MISMATCH, ...: stable, for scripts and alerts
    severity: str  # error | warning | info
    message: str
    fix: str
    source: str = ""  # the stream source it is about (HOST:PID:rRANK)
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == ERROR for f in findings)


def worst_first(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: _RANK.get(f.severity, len(_RANK))))
