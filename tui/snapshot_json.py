"""``eagle3-top --once --json``: one snapshot as a JSON object (schema in docs/snapshot.md).

Built from the same ``Snapshot`` the screen draws, so a script sees what a user would have seen.
Every value is plain JSON: non-finite floats become null, wire strings are escaped as the screen
escapes them (they came from a publisher the monitor does not control).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from eagle3_top.tracer.analysis.diagnose import expected_accept_length
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.schema.text import printable

from .fleet import fleet_summary
from .snapshot import ProposalRow, Snapshot, SourceSnapshot
from .source_state import source_state
from .token_text import TokenText
from .tokenizer_shelf import TokenizerShelf

SCHEMA = "eagle3-top-snapshot/1"


def snapshot_json(
    snap: Snapshot, manifest: Manifest | None = None, tokenizers: TokenizerShelf | None = None
) -> dict[str, Any]:
    """``tokenizers``: where one is known for a source, its proposals carry their text too."""
    out = {
        "schema": SCHEMA,
        "time": snap.now,
        "time_iso": datetime.fromtimestamp(snap.now, timezone.utc).isoformat(timespec="milliseconds"),
        "endpoints": [{"endpoint": ep, "state": st} for ep, st in snap.endpoints],
        "transport": {
            "frames": snap.frames,
            "bytes": snap.bytes,
            "events": snap.events,
            "malformed": snap.malformed,
            "last_malformed": snap.last_malformed,
            "unknown_kinds": snap.unknown_kinds,
            "evicted_sources": snap.evicted_sources,
            # the sources the book forgot, by kind: "proven" had sent a valid hello and steps
            "evictions": dataclasses.asdict(snap.evictions),
        },
        "fleet": _fleet(snap),
        "sources": [_source(src, snap, manifest, tokenizers) for src in snap.sources],
    }
    return _plain(out)


def _fleet(snap: Snapshot) -> dict[str, Any]:
    """The fleet view's merged figures: the sources' counts added up, then divided once."""
    f = fleet_summary(snap)
    have = f.request_steps > 0
    return {
        "sources": f.sources,
        "accept_length": f.accept_length if have else None,
        "accept_rate": f.accept_rate if have else None,
        "request_steps": f.request_steps,
        "verify_steps": f.verify_steps,
        "conditional": list(f.conditional),
        "unconditional": list(f.unconditional),
        "steps_per_s": f.steps_per_s,
        "tokens_per_s": f.tokens_per_s,
        "worst_first": [r.source.key for r in f.rows],
        "finding_groups": [g.describe() for g in f.groups],
        "events": [e.describe(f.now) for e in f.events],
    }


def _source(
    src: SourceSnapshot, snap: Snapshot, manifest: Manifest | None, tokenizers: TokenizerShelf | None
) -> dict[str, Any]:
    words, level = source_state(src, snap.endpoints)
    tokens = tokenizers.for_hello(src.hello).tokens if tokenizers is not None else None
    s = src.summary
    expected, expected_by = (None, "") if src.hello is None else expected_accept_length(src.hello, manifest)
    have = s.request_steps > 0
    return {
        "key": src.key,
        "host": src.host,
        "pid": src.pid,
        "rank": src.rank,
        "engine": src.engine,
        "state": words,
        "state_level": level,
        "age_s": src.age_s,
        "stale": src.stale,
        "dead": src.dead,
        "acceptance": {
            "accept_length": s.mean_accept_length if have else None,
            "accept_rate": s.accept_rate if have and src.speculates else None,  # no drafts, no rate
            "request_steps": s.request_steps,
            "verify_steps": s.verify_steps,
            "conditional": list(s.conditional),
            "unconditional": list(s.unconditional),
            "histogram": {str(k): int(v) for k, v in enumerate(s.histogram) if k and v},
            "steps_per_s": s.steps_per_s,
            "tokens_per_s": s.tokens_per_s,
            # mean accept length per second, oldest first; null for a second without a step
            # (an accept length is at least 1 whenever there is one)
            "history": [x if x > 0 else None for x in s.history],
            "expected_accept_length": expected,
            "expected_by": expected_by or None,
            "training_acc": list(src.training_acc),
        },
        # the same figures over the last seconds (the acceptance above is since the first step)
        "recent": {
            f"last_{w}s": {
                "accept_length": r.mean_accept_length if r.request_steps else None,
                "accept_rate": r.accept_rate if r.request_steps else None,
                "request_steps": r.request_steps,
                "verify_steps": r.verify_steps,
                "conditional": list(r.conditional),
                "unconditional": list(r.unconditional),
            }
            for w, r in src.windows
        },
        # with --baseline-tok-s: over the last seconds, the rate and the accept length compared
        "payoff": None if src.payoff is None else dataclasses.asdict(src.payoff),
        "last_step": {"batch": src.last_batch, "n": src.last_n, "topk": src.last_topk},
        "events": {
            "received": src.received,
            "steps": src.steps,
            "aux": src.auxes,
            "hellos": src.hellos,
            "probes": src.probes,
            "malformed": src.malformed,
            "last_malformed": src.last_malformed,
            "step_errors": src.step_errors,
        },
        "loss": {**dataclasses.asdict(src.loss), "describe": src.loss.describe()},
        "hello": None if src.hello is None else src.hello.to_body(),
        "health": None if src.health is None else src.health.to_body(),
        "findings": [f.to_json() for f in src.findings],
        "findings_error": src.findings_error,
        "layer_map": [
            {**dataclasses.asdict(row), "ok": row.ok} for row in src.layer_rows
        ],  # empty without a manifest
        "proposals": [
            {
                "rid": p.rid,
                "root": p.root,
                "proposals": list(p.proposals),
                "on_accepted_path": list(p.accepted_mask),
                "accepted": p.accepted,
                "bonus": p.bonus,
                "tree": p.tree,
                **_texts(p, tokens),
            }
            for p in src.proposals
        ],
    }


def _texts(p: ProposalRow, tokens: TokenText | None) -> dict[str, Any]:
    """The pieces the screen shows beside the ids, with a tokenizer only."""
    if tokens is None:
        return {}
    return {
        "root_text": tokens.piece(p.root),
        "proposals_text": [tokens.piece(t) for t in p.proposals],
        "bonus_text": None if p.bonus is None else tokens.piece(p.bonus),
    }


def _plain(v: Any) -> Any:
    """JSON values only: numpy scalars to Python, NaN and infinities to null, strings escaped."""
    if isinstance(v, str):
        return printable(v, 4096)
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {str(_plain(k)): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item"):  # a numpy scalar
        return _plain(v.item())
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return printable(str(v), 4096)
