"""The startup wiring report (the hello body), read from SGLang's live objects.

Keys mirror ``hooks/toy_tracing.py::toy_hello`` exactly (docs/protocol.md), plus a few extra keys
that subscribers ignore when they do not know them (``spec.requested_source``, ``aux.capture_source``,
``aux.family``, ``aux.capture_note``, ``aux.sglang_input_width``).

Requested vs effective speculative args:
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
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from eagle3_top.tracer.manifest import d2t_summary, draft_layer_ids

from . import layers_native as ln

log = logging.getLogger("eagle3_top.hooks.sglang")

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
) -> dict[str, Any]:
    """``{"requested", "effective", "rewrites", "requested_source"}`` for the hello's ``spec``.

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

    spec_keys = tuple(SPEC_FIELDS)
    return {
        "requested": {k: requested.get(k) for k in spec_keys},
        "effective": {k: effective.get(k) for k in spec_keys},
        "rewrites": rewrites,
        "requested_source": source,
        "max_running_requests": {
            "requested": requested.get("max_running_requests"),
            "effective": effective.get("max_running_requests"),
        },
    }


# -- draft config ------------------------------------------------------------------------------------


def draft_config_as_written(draft_model_path: str | None, draft_model: Any = None) -> dict[str, Any]:
    """The draft's config.json as written on disk (local dir or HF cache), else the loaded config."""
    if draft_model_path:
        candidates = [os.path.join(draft_model_path, "config.json")]
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(draft_model_path, "config.json")
            if isinstance(cached, str):
                candidates.append(cached)
        except Exception:
            pass
        for path in candidates:
            try:
                with open(path) as f:
                    cfg = json.load(f)
                if isinstance(cfg, dict):
                    return cfg
            except (OSError, ValueError):
                continue
    cfg_obj = getattr(draft_model, "config", None)
    if cfg_obj is not None and hasattr(cfg_obj, "to_dict"):
        try:
            d = cfg_obj.to_dict()
            d["_from_loaded_config"] = True
            return d
        except Exception:
            pass
    return {}


def _fc_in_features(draft_model: Any) -> int | None:
    for m in ln._inner_models(draft_model):
        fc = getattr(m, "fc", None)
        if fc is None:
            continue
        for attr in ("in_features", "input_size"):
            v = getattr(fc, attr, None)
            if isinstance(v, int):
                return v
        w = getattr(fc, "weight", None)
        if w is not None and getattr(w, "dim", lambda: 0)() == 2:
            return int(w.shape[1])
    return None


def _vocab(draft_model: Any, target_vocab: int | None) -> dict[str, Any] | None:
    hot = getattr(draft_model, "hot_token_id", None)
    if hot is None:
        return None
    try:
        arr = hot.detach().to("cpu").numpy() if hasattr(hot, "detach") else np.asarray(hot)
    except Exception:
        return None
    arr = arr.astype(np.int64).reshape(-1)
    return d2t_summary(arr - np.arange(arr.shape[0]), target_vocab)


def _dtype(model: Any) -> str | None:
    try:
        p = next(iter(model.parameters()))
        return str(p.dtype).replace("torch.", "")
    except Exception:
        return None


def _hf(cfg: Any, key: str) -> Any:
    text = getattr(cfg, "text_config", None) or getattr(cfg, "get_text_config", lambda: None)()
    for c in (cfg, text):
        if c is not None and getattr(c, key, None) is not None:
            return getattr(c, key)
    return None


_UNSET = object()


def ids_read_from_runner(target_runner: Any) -> tuple[Any, bool | None]:
    """``(eagle_aux_hidden_state_layer_ids, eagle_use_aux_hidden_state)`` as SGLang read them."""
    holders = [getattr(target_runner, "spec_aux_config", None), target_runner]
    for h in holders:
        if h is not None and hasattr(h, "eagle_aux_hidden_state_layer_ids"):
            ids = h.eagle_aux_hidden_state_layer_ids
            use = getattr(h, "eagle_use_aux_hidden_state", None)
            return (None if ids is None else [int(v) for v in ids]), use
    return _UNSET, None


def wiring_from_objects(
    server_args: Any,
    target_model: Any,
    draft_model: Any,
    draft_model_path: str | None = None,
    *,
    target_runner: Any = None,
    draft_runner: Any = None,
    ids_read: Any = _UNSET,
    use_aux_hidden_state: bool | None = None,
    live_spec: dict[str, Any] | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    sglang_version: str | None = None,
    argv: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The hello body, from plain objects (SGLang's real ones, live or built on CPU in tests).

    ``ids_read``: the ids SGLang read (None = fell back to its default); taken from
    ``target_runner.spec_aux_config`` when not given.
    """
    if draft_model_path is None:
        draft_model_path = getattr(server_args, "speculative_draft_model_path", None)
    tcfg = getattr(target_model, "config", None)
    n_layers = _hf(tcfg, "num_hidden_layers")
    hidden = _hf(tcfg, "hidden_size")
    target_vocab = _hf(tcfg, "vocab_size")
    archs = getattr(tcfg, "architectures", None) or [type(target_model).__name__]
    target_arch = archs[0]

    dcfg = draft_config_as_written(draft_model_path, draft_model)
    declared, where = draft_layer_ids(dcfg)
    draft_archs = dcfg.get("architectures") or [
        type(draft_model).__name__ if draft_model is not None else None
    ]

    if ids_read is _UNSET and target_runner is not None:
        ids_read, use_from_runner = ids_read_from_runner(target_runner)
        if use_aux_hidden_state is None:
            use_aux_hidden_state = use_from_runner
    ids_known = ids_read is not _UNSET
    if not ids_known:
        ids_read = None

    fam = ln.family_of(target_model, target_arch)
    live = ln.live_capture(target_model)
    if use_aux_hidden_state is None:
        use_aux_hidden_state = live["capture_aux"]
    native = live["native"]
    if native is not None and use_aux_hidden_state is not False and live["capture_aux"] is not False:
        canonical = ln.canonical_from_native(fam, native, n_layers) if n_layers else None
        slots = len(canonical) if canonical is not None else None
        note = ln.capture_failure(fam, native, n_layers) if n_layers else None
    else:
        canonical, slots, note = [], 0, None
        native = native if native is not None else []
    width = slots * hidden if (slots and hidden) else hidden

    sglang_width = None
    if draft_runner is not None:
        try:
            from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim

            sglang_width = int(get_draft_input_from_target_hidden_dim(draft_runner))
        except Exception:
            sglang_width = None

    spec = spec_report(server_args, live=live_spec, target_arch=target_arch, argv=argv)
    draft_vocab = dcfg.get("draft_vocab_size") or _hf(
        getattr(draft_model, "config", None), "draft_vocab_size"
    )
    if sglang_version is None:
        try:
            import sglang

            sglang_version = getattr(sglang, "__version__", None)
        except Exception:
            sglang_version = None

    hello: dict[str, Any] = {
        "engine": {"name": "sglang", "version": sglang_version},
        "model": {
            "target_path": getattr(server_args, "model_path", None),
            "draft_path": draft_model_path,
            "arch": target_arch,
            "num_layers": n_layers,
            "hidden_size": hidden,
            "vocab_size": target_vocab,
            "dtype": _dtype(target_model),
            "draft_arch": draft_archs[0],
            "draft_vocab_size": draft_vocab,
        },
        "tp": {"rank": tp_rank, "size": tp_size},
        "spec": spec,
        "vocab": _vocab(draft_model, target_vocab),
        "aux": {
            "eagle_config": dcfg.get("eagle_config"),
            "declared_ids": declared,
            "ids_location": where,
            "ids_read": ids_read,
            "ids_read_known": ids_known,
            "use_aux_hidden_state": use_aux_hidden_state,
            "capture_native": native,
            "capture_canonical": canonical,
            "capture_source": live["source"],
            "capture_note": note,
            "family": fam,
            "convention": ln.CONVENTIONS[fam],
            "slots": slots,
            "width": width,
            "expected_width": _fc_in_features(draft_model),
            "sglang_input_width": sglang_width,
        },
    }
    if not ids_known:
        # we could not see what SGLang read: leave the key out rather than claim a fallback
        hello["aux"].pop("ids_read", None)
    return hello


# -- from the live worker -----------------------------------------------------------------------------


def wiring_from_worker(worker: Any, *, tp_rank: int = 0, tp_size: int = 1) -> dict[str, Any]:
    """The hello from a live ``EAGLEWorkerV2`` (``self`` inside ``verify``)."""
    target_runner = worker.target_worker.model_runner
    draft_worker = worker.draft_worker
    draft_runner = getattr(draft_worker, "draft_runner", None) or getattr(draft_worker, "model_runner", None)
    server_args = getattr(worker, "server_args", None) or getattr(target_runner, "server_args", None)
    live_spec = {
        "algorithm": getattr(worker, "speculative_algorithm", None),
        "num_steps": getattr(worker, "speculative_num_steps", None),
        "topk": getattr(worker, "topk", None),
        "num_draft_tokens": getattr(worker, "speculative_num_draft_tokens", None),
    }
    return wiring_from_objects(
        server_args,
        target_runner.model,
        getattr(draft_runner, "model", None),
        getattr(server_args, "speculative_draft_model_path", None),
        target_runner=target_runner,
        draft_runner=draft_runner,
        live_spec=live_spec,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )
