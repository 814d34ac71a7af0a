"""The ``--speculative-*`` flags as requested and as SGLang really runs them.

- SGLang 0.5.23 keeps the raw inputs on ``ServerArgs`` and records every resolution in
  ``server_args._resolved_overrides`` (``declare_resolution``); the effective value is
  ``resolving_view(server_args).<field>``. We read both, and turn the ``_handle_eagle_family``
  declarations into rewrites.
- Older SGLang (0.5.17) rewrites ``ServerArgs`` in place in ``__post_init__``; the requested values are
  recovered by re-parsing ``sys.argv`` with SGLang's own parser (spawned scheduler processes inherit
  the launcher's argv). Without a usable argv (an ``sgl.Engine`` in a script) the requested values are
  reported as the effective ones and ``requested_source`` says ``unknown``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from eagle3_top.tracer.schema import Rewrite, SpecConfig
from eagle3_top.tracer.serving.wiring import SpecReport

SPEC_FIELDS = {
    "algorithm": "speculative_algorithm",
    "num_steps": "speculative_num_steps",
    "topk": "speculative_eagle_topk",
    "num_draft_tokens": "speculative_num_draft_tokens",
}
EXTRA_FIELDS = {"max_running_requests": "max_running_requests"}
TOPK1_REASON = "topk=1 forces num_draft_tokens = num_steps + 1"
MAX_RUNNING_REASON = "max_running_requests reset to 48 for speculative decoding (not given)"


def _auto_reason(eff: dict[str, Any], target_arch: str | None) -> str:
    return (
        "not given: SGLang auto-chooses (steps, topk, draft tokens) = "
        f"({eff.get('num_steps')}, {eff.get('topk')}, {eff.get('num_draft_tokens')}) for {target_arch}"
    )


def _plain(v: Any) -> Any:
    """Enum members (``SpeculativeAlgorithm.EAGLE3``) and numpy scalars to plain values."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    name = getattr(v, "name", None)
    if isinstance(name, str):
        return name
    try:
        return int(v)
    except (TypeError, ValueError):
        return str(v)


def _raw_fields(server_args: Any, names: dict[str, str]) -> dict[str, Any]:
    return {k: _plain(getattr(server_args, f, None)) for k, f in names.items()}


def _resolved_fields(server_args: Any, names: dict[str, str]) -> dict[str, Any] | None:
    """0.5.23: the values after SGLang's resolution pipeline, or None on older versions.

    0.5.17 also has ``_resolved_overrides`` (model-override declarations only) but rewrites the spec
    fields in place; only a record with ``resolve_once`` keeps its raw inputs.
    """
    if not hasattr(server_args, "resolve_once") or getattr(server_args, "_resolved_overrides", None) is None:
        return None
    try:
        from sglang.srt.arg_groups.overrides import resolving_view

        view = resolving_view(server_args)
        return {k: _plain(getattr(view, f, None)) for k, f in names.items()}
    except Exception:
        # apply the declarations ourselves, last one wins
        out = _raw_fields(server_args, names)
        inv = {f: k for k, f in names.items()}
        for _src, fields in server_args._resolved_overrides:
            for f, v in fields.items():
                if f in inv:
                    out[inv[f]] = _plain(v)
        return out


def _argv_fields(argv: Sequence[str] | None, names: dict[str, str]) -> dict[str, Any] | None:
    """Re-parse the launcher's argv with SGLang's own parser (defaults = not given)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a.startswith("--speculative") for a in argv):
        return None
    try:
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(add_help=False)
        ServerArgs.add_cli_args(parser)
        ns, _ = parser.parse_known_args(argv)
        return {k: _plain(getattr(ns, f, None)) for k, f in names.items()}
    except (Exception, SystemExit):
        return None


def spec_report(
    server_args: Any,
    *,
    live: dict[str, Any] | None = None,
    target_arch: str | None = None,
    argv: Sequence[str] | None = None,
) -> SpecReport:
    """The speculative flags as requested and as SGLang runs them, with every silent rewrite.

    ``live``: effective values read from the running worker (they win over server args).
    """
    names = {**SPEC_FIELDS, **EXTRA_FIELDS}
    resolved = _resolved_fields(server_args, names)
    if resolved is not None:
        requested, source = _raw_fields(server_args, names), "declare_resolution"
        effective = resolved
    else:
        effective = _raw_fields(server_args, names)
        parsed = _argv_fields(argv, names)
        if parsed is not None:
            requested, source = parsed, "argv"
        else:
            requested, source = dict(effective), "unknown"
    for k, v in (live or {}).items():
        if v is not None and k in effective:
            effective[k] = _plain(v)
    if requested.get("algorithm") == "NEXTN":
        requested["algorithm"] = "NEXTN"  # an alias of EAGLE; reported as requested

    rewrites: list[dict[str, Any]] = []
    auto = (
        requested.get("num_steps") is None and effective.get("num_steps") is not None and source != "unknown"
    )
    for key in ("num_steps", "topk", "num_draft_tokens"):
        frm, to = requested.get(key), effective.get(key)
        if frm == to:
            continue
        if auto and frm is None:
            reason = _auto_reason(effective, target_arch)
        elif (
            key == "num_draft_tokens"
            and effective.get("topk") == 1
            and to == (effective.get("num_steps") or 0) + 1
        ):
            reason = TOPK1_REASON
        elif key == "topk" and frm is None:
            reason = "not given: default"
        else:
            reason = "changed by the server"
        rewrites.append({"param": key, "from": frm, "to": to, "reason": reason})
    frm, to = requested.get("max_running_requests"), effective.get("max_running_requests")
    if frm != to and source != "unknown":
        reason = MAX_RUNNING_REASON if frm is None and to == 48 else "changed by the server"
        rewrites.append({"param": "max_running_requests", "from": frm, "to": to, "reason": reason})

    return SpecReport(
        requested=SpecConfig.from_body(requested),
        effective=SpecConfig.from_body(effective),
        rewrites=tuple(map(Rewrite.from_body, rewrites)),
        requested_source=source,
        max_running_requests=(requested.get("max_running_requests"), effective.get("max_running_requests")),
    )
