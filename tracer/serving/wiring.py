"""The wiring report (the hello) read from live models: the one builder both engine adapters use.

Engines hold their models as PyTorch modules with SGLang's attribute names, and the built-in engine
mirrors them: the capture list on the decoder stack (``layers_to_capture``, or
``_is_layer_to_capture`` flags on its layers), ``capture_aux_hidden_states``, the draft's ``fc`` and
``hot_token_id``. This module reads those attributes and the draft config as written on disk, and
fills a ``schema.Hello`` by the serving engine's capture rules (``tracer.engines``). Adapters add only what is theirs (how the
requested flags are learnt, which ids the server read). Attribute reads and numpy only: nothing here
imports an engine or touches a device.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from eagle3_top.tracer.engines.base import Engine
from eagle3_top.tracer.files import open_regular
from eagle3_top.tracer.schema import AuxWiring, Hello, ModelInfo, Rewrite, SpecConfig, VocabSummary
from eagle3_top.tracer.serving.claims import draft_claims

# -- the draft config, as written --------------------------------------------------------------------


MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few kB; a bigger one is not read in the server


def _int_or_none(v: Any) -> int | None:
    return v if type(v) is int else None


def _small_map(v: Any) -> dict[str, Any] | None:
    """The draft's eagle_config for the hello, if it is a small, plain JSON map: a hostile one must
    not make the hello too big or too deep to encode (no hello would go out at all)."""
    if not isinstance(v, dict):
        return None
    try:
        return v if len(json.dumps(v)) <= 4096 else None
    except (TypeError, ValueError, RecursionError):
        return None


def _config_candidates(draft_path: str) -> list[str]:
    """The directory's config.json; a Hugging Face repo id's cached one only when there is none (the
    hub library costs a third of a second to import, for nothing when the directory is local)."""
    local = os.path.join(draft_path, "config.json")
    if os.path.exists(local) or os.path.isdir(draft_path):
        return [local]
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(draft_path, "config.json")
    except Exception:
        return [local]
    return [local, cached] if isinstance(cached, str) else [local]


def draft_config_as_written(draft_path: str | None, draft_model: Any = None) -> dict[str, Any]:
    """The draft's config.json as written on disk (a local directory or the Hugging Face cache), else
    the loaded config (marked ``_from_loaded_config``), else {}. What an engine parsed may hide keys
    it ignores, such as ids at the top level."""
    if draft_path:
        for path in _config_candidates(draft_path):
            try:
                with open_regular(path) as f:
                    raw = f.read(MAX_CONFIG_BYTES + 1)
                if len(raw) > MAX_CONFIG_BYTES:
                    continue
                cfg = json.loads(raw)
                if isinstance(cfg, dict):
                    return cfg
            except (OSError, ValueError, RecursionError):
                continue
    cfg_obj = getattr(draft_model, "config", None)
    if cfg_obj is not None and hasattr(cfg_obj, "to_dict"):
        try:
            d: dict[str, Any] = cfg_obj.to_dict()
            d["_from_loaded_config"] = True
            return d
        except Exception:
            pass
    return {}


def d2t_summary(d2t: np.ndarray, vocab_size: int | None) -> VocabSummary:
    """A d2t offset map (target = draft + d2t[draft]) summarised for the hello and the manifest."""
    hot = d2t + np.arange(d2t.shape[0])
    return VocabSummary(
        size=int(d2t.shape[0]),
        sha256=hashlib.sha256(np.ascontiguousarray(d2t, dtype="<i8").tobytes()).hexdigest()[:16],
        min_target=int(hot.min()) if hot.size else 0,
        max_target=int(hot.max()) if hot.size else 0,
        unique_targets=int(np.unique(hot).size),
        all_zero=bool(not np.any(d2t)),
        vocab_size=vocab_size,
    )


# -- live models ---------------------------------------------------------------------------------


def inner_models(model: Any) -> list[Any]:
    """The module itself and the usual places the decoder stack sits (``model``, ``language_model``)."""
    out: list[Any] = []
    seen: set[int] = set()
    stack = [model]
    while stack and len(out) < 8:
        m = stack.pop(0)
        if m is None or id(m) in seen:
            continue
        seen.add(id(m))
        out.append(m)
        for name in ("model", "language_model", "text_model"):
            sub = getattr(m, name, None)
            if sub is not None and not isinstance(sub, (str, int, float)):
                stack.append(sub)
    return out


@dataclass(frozen=True)
class LiveCapture:
    native: list[int] | None  # the capture list as held, list order kept; None = none found
    source: str | None  # layers_to_capture | _is_layer_to_capture | aux_hidden_state_layers
    capture_aux: bool | None  # the model's capture_aux_hidden_states, None = no such attribute


def live_capture(model: Any) -> LiveCapture:
    """What a live target holds: ``layers_to_capture`` as held, the indices of layers flagged
    ``_is_layer_to_capture`` (SGLang's Qwen MoE, Qwen3-Next, Qwen3.5 style), or vLLM's
    ``aux_hidden_state_layers``."""
    capture_aux = None
    for m in inner_models(model):
        if capture_aux is None and hasattr(m, "capture_aux_hidden_states"):
            capture_aux = bool(m.capture_aux_hidden_states)
    for m in inner_models(model):
        ltc = getattr(m, "layers_to_capture", None)
        if isinstance(ltc, (list, tuple)) and (ltc or hasattr(m, "layers")):
            if ltc or not _flagged(m):
                return LiveCapture([int(v) for v in ltc], "layers_to_capture", capture_aux)
        # vLLM's decoder stacks (EagleModelMixin, DeepSeek-V2): native point k = the input of layer k
        held = getattr(m, "aux_hidden_state_layers", None)
        if isinstance(held, (list, tuple)) and hasattr(m, "layers"):
            return LiveCapture([int(v) for v in held], "aux_hidden_state_layers", capture_aux)
        flagged = _flagged(m)
        if flagged:
            return LiveCapture(flagged, "_is_layer_to_capture", capture_aux)
    return LiveCapture(None, None, capture_aux)


def _flagged(m: Any) -> list[int]:
    stack = getattr(m, "layers", None)
    if stack is None:
        return []
    try:
        return [i for i, layer in enumerate(stack) if getattr(layer, "_is_layer_to_capture", False)]
    except TypeError:
        return []


def fc_in_features(draft_model: Any) -> int | None:
    """The input width of the draft's ``fc``: what it expects the aux states to be."""
    for m in inner_models(draft_model):
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


def _host_ids(t: Any) -> np.ndarray | None:
    """A tensor (or array) of ids as a flat int64 host array; None when there is none or it cannot
    be read."""
    if t is None:
        return None
    try:
        arr = t.detach().to("cpu").numpy() if hasattr(t, "detach") else np.asarray(t)
    except Exception:
        return None
    out: np.ndarray = arr.astype(np.int64).reshape(-1)
    return out


def vocab_of(draft_model: Any, target_vocab: int | None) -> VocabSummary | None:
    """The draft's d2t map: from the target ids SGLang holds (``hot_token_id``, draft id → target
    id), or the offsets vLLM holds (``draft_id_to_target_id``, target = draft + d2t[draft])."""
    hot = _host_ids(getattr(draft_model, "hot_token_id", None))
    if hot is not None:
        return d2t_summary(hot - np.arange(hot.shape[0]), target_vocab)
    d2t = _host_ids(getattr(draft_model, "draft_id_to_target_id", None))
    return None if d2t is None else d2t_summary(d2t, target_vocab)


def dtype_of(model: Any) -> str | None:
    try:
        p = next(iter(model.parameters()))
        return str(p.dtype).replace("torch.", "")
    except Exception:
        return None


def config_field(cfg: Any, key: str) -> Any:
    """A Hugging Face config field, from the config or its ``text_config`` (multimodal targets)."""
    text = getattr(cfg, "text_config", None) or getattr(cfg, "get_text_config", lambda: None)()
    for c in (cfg, text):
        if c is not None and getattr(c, key, None) is not None:
            return getattr(c, key)
    return None


# -- the report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecReport:
    """The speculative flags as the adapter learnt them."""

    requested: SpecConfig
    effective: SpecConfig
    rewrites: tuple[Rewrite, ...] = ()
    requested_source: str | None = None
    max_running_requests: tuple[int | None, int | None] | None = None


@dataclass(frozen=True)
class TargetFacts:
    """What a target is, read from a live model or predicted from its config."""

    arch: str | None
    num_layers: int | None
    hidden_size: int | None
    vocab_size: int | None = None
    dtype: str | None = None
    capture: LiveCapture = LiveCapture(None, None, None)
    model: Any = None  # the live module, when there is one: its class decides the capture family


@dataclass(frozen=True)
class DraftFacts:
    """What a draft is: its config as written, and what its ``fc`` expects."""

    config: Mapping[str, Any]
    arch: str | None
    fc_in: int | None  # the input width of its fc: what it expects the aux states to be
    vocab: VocabSummary | None = None
    draft_vocab_size: int | None = None


def target_facts(target_model: Any, target_arch: str | None = None) -> TargetFacts:
    tcfg = getattr(target_model, "config", None)
    if target_arch is None:
        target_arch = (getattr(tcfg, "architectures", None) or [type(target_model).__name__])[0]
    vocab = config_field(tcfg, "vocab_size")
    return TargetFacts(
        arch=target_arch,
        num_layers=config_field(tcfg, "num_hidden_layers"),
        hidden_size=config_field(tcfg, "hidden_size"),
        vocab_size=vocab,
        dtype=dtype_of(target_model),
        capture=live_capture(target_model),
        model=target_model,
    )


def draft_facts(draft_model: Any, draft_path: str | None, target_vocab: int | None) -> DraftFacts:
    dcfg = draft_config_as_written(draft_path, draft_model)
    archs = dcfg.get("architectures")
    arch = (
        archs[0]
        if isinstance(archs, list) and archs and isinstance(archs[0], str)
        else (type(draft_model).__name__ if draft_model is not None else None)
    )
    return DraftFacts(
        config=dcfg,
        arch=arch,
        fc_in=fc_in_features(draft_model),
        vocab=vocab_of(draft_model, target_vocab),
        draft_vocab_size=_int_or_none(dcfg.get("draft_vocab_size"))
        or config_field(getattr(draft_model, "config", None), "draft_vocab_size"),
    )


def wiring_report(
    *,
    engine: Engine,
    engine_version: str | None,
    target_model: Any,
    draft_model: Any,
    target_path: str | None,
    draft_path: str | None,
    spec: SpecReport,
    use_aux_hidden_state: bool | None,
    ids_read: list[int] | None,
    ids_read_known: bool = True,
    target_arch: str | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    input_width: int | None = None,
) -> Hello:
    """The hello of a live engine. ``use_aux_hidden_state`` None: read the model's own flag."""
    target = target_facts(target_model, target_arch)
    return assemble_hello(
        engine=engine,
        engine_version=engine_version,
        target=target,
        draft=draft_facts(draft_model, draft_path, target.vocab_size),
        target_path=target_path,
        draft_path=draft_path,
        spec=spec,
        use_aux_hidden_state=use_aux_hidden_state,
        ids_read=ids_read,
        ids_read_known=ids_read_known,
        tp_rank=tp_rank,
        tp_size=tp_size,
        input_width=input_width,
    )


def assemble_hello(
    *,
    engine: Engine,
    engine_version: str | None,
    target: TargetFacts,
    draft: DraftFacts,
    target_path: str | None,
    draft_path: str | None,
    spec: SpecReport,
    use_aux_hidden_state: bool | None,
    ids_read: list[int] | None,
    ids_read_known: bool = True,
    tp_rank: int = 0,
    tp_size: int = 1,
    input_width: int | None = None,
) -> Hello:
    """The hello from what is known of the target and the draft, by ``engine``'s capture rules:
    live (``wiring_report``) or predicted from config files (``preflight``)."""
    n_layers, hidden = target.num_layers, target.hidden_size
    as_read = engine.read_ids(draft.config)  # where this engine finds them (vLLM: the top level first)
    declared, where = as_read.declared, as_read.declared_at
    family = engine.family(target.arch, target.model)
    live = target.capture
    if use_aux_hidden_state is None:
        use_aux_hidden_state = live.capture_aux
    native = live.native
    canonical: list[int] | None
    note = None
    if native is not None and use_aux_hidden_state is not False and live.capture_aux is not False:
        got = engine.capture(family, native, n_layers) if n_layers else None
        canonical = got.canonical if got is not None else None
        slots = len(canonical) if canonical is not None else None
        note = got.failure if got is not None else None
    else:  # the target captures nothing: the draft gets the final hidden state
        canonical, slots, native = [], 0, native if native is not None else []
    return Hello(
        engine=engine.name,
        engine_version=engine_version,
        model=ModelInfo(
            target_path=target_path,
            draft_path=draft_path,
            arch=target.arch,
            num_layers=n_layers,
            hidden_size=hidden,
            vocab_size=target.vocab_size,
            dtype=target.dtype,
            draft_arch=draft.arch,
            draft_vocab_size=draft.draft_vocab_size,
        ),
        tp_rank=tp_rank,
        tp_size=tp_size,
        requested=spec.requested,
        effective=spec.effective,
        rewrites=spec.rewrites,
        requested_source=spec.requested_source,
        max_running_requests=spec.max_running_requests,
        vocab=draft.vocab,
        claims=draft_claims(draft_path),
        aux=AuxWiring(
            eagle_config=_small_map(draft.config.get("eagle_config")),
            declared_ids=declared,
            ids_location=where,
            ids_read=ids_read,
            ids_read_known=ids_read_known,
            use_aux_hidden_state=use_aux_hidden_state is not False,  # unknown: the engines' default, on
            capture_native=native,
            capture_canonical=canonical,
            capture_source=live.source,
            capture_note=note,
            family=family,
            convention=engine.convention(family),
            slots=slots,
            width=slots * hidden if (slots and hidden) else hidden,
            expected_width=draft.fc_in,
            input_width=input_width,
        ),
    )
