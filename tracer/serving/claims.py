"""What a draft says about itself: the per-position accuracy (``acc_i``) and simulated accept
length its training reported, when its directory holds them (``training_metrics.json``). The
hello carries them, so ``check`` can judge a server's acceptance without a manifest."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from eagle3_top.tracer.files import open_regular
from eagle3_top.tracer.schema import DraftClaims

METRICS_FILE = "training_metrics.json"
MAX_METRICS_BYTES = 1 << 20


MAX_POSITIONS = 1024
MAX_ACC_LEN = float(MAX_POSITIONS)

# How a value is checked: returns it as a float in [lo, hi], or raises ValueError naming ``key``.
Number = Callable[[Any, str, float, float], float]


def plain_number(v: Any, key: str, lo: float, hi: float) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not lo <= v <= hi:  # NaN fails too
        raise ValueError(f"{key}: expected a number in [{lo:g}, {hi:g}], got {str(v)[:40]!r}")
    return float(v)


def metrics_from_json(
    data: Mapping[str, Any], number: Number = plain_number
) -> tuple[list[float], float | None]:
    """Per-position accuracy and SpecForge's ``simulated_acc_len`` (accepted drafts, no bonus),
    in any of the spellings SpecForge and EAGLE use: ``acc_i`` / ``train/acc_i`` /
    ``eval/acceptance_rate_i`` keys, or lists under ``per_position_acc`` / ``acc``. Without a
    simulated accept length, it is computed from the accuracies (a chain: the product of the
    first i, summed). Raises ValueError (``number``'s) for a value out of range."""
    acc: list[float] = []
    for key in ("per_position_acc", "eval/per_position_acc", "acc_per_position", "acc"):
        val = data.get(key)
        if isinstance(val, list) and val:
            if len(val) > MAX_POSITIONS:
                raise ValueError(f"{key}: expected at most {MAX_POSITIONS} entries, got {len(val)}")
            acc = [number(v, f"{key}[{i}]", 0.0, 1.0) for i, v in enumerate(val)]
            break
    if not acc:
        for prefix in ("eval/acc_", "train/acc_", "acc_", "eval/acceptance_rate_"):
            found = {}
            for k, v in data.items():
                pos = k[len(prefix) :] if isinstance(k, str) and k.startswith(prefix) else ""
                if pos.isdigit() and len(pos) <= 4:
                    found[int(pos)] = number(v, k, 0.0, 1.0)
            if found:
                acc = [found[i] for i in sorted(found)]
                break
    sim = None
    for key in ("simulated_acc_len", "eval/simulated_acc_len"):
        if data.get(key) is not None:
            sim = number(data[key], key, 0.0, MAX_ACC_LEN)
    if sim is None and acc:
        sim, cum = 0.0, 1.0
        for a in acc:
            cum *= a
            sim += cum
    return acc, sim


def draft_claims(draft_path: str | None) -> DraftClaims | None:
    """The claims in a local draft directory, or None (no file, unreadable, or nothing usable).
    Read once at start-up, at most ``MAX_METRICS_BYTES``; never raises."""
    if not draft_path:
        return None
    path = os.path.join(draft_path, METRICS_FILE)
    try:
        with open_regular(path) as f:
            raw = f.read(MAX_METRICS_BYTES + 1)
        if len(raw) > MAX_METRICS_BYTES:
            return None
        data = json.loads(raw, parse_constant=lambda _c: None)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        acc, sim = metrics_from_json(data)
    except ValueError:  # a claim we cannot read is no claim
        return None
    if sim is None:
        return None
    return DraftClaims(acc=acc or None, simulated_acc_len=sim, source=METRICS_FILE)
