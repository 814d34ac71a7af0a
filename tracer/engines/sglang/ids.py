"""Where SGLang reads a draft's aux layer ids (``resolve_spec_aux_hidden_state_config`` in
``model_executor/model_runner_components/spec_aux_hidden_state.py``, 0.5.17–0.5.23): only the nested
``eagle_config.eagle_aux_hidden_state_layer_ids``. A top-level key, a missing key or any error reading
it gives ``None``, silently, and the target captures its default layers. ``use_aux_hidden_state``
stays on unless ``eagle_config`` says otherwise (any falsy value, as SGLang's ``bool`` reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_top.tracer.engines.base import IdsAsRead, declared_ids

IDS_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"


def eagle_config_as_read(cfg: Mapping[str, Any]) -> tuple[bool, Any]:
    """``(use_aux_hidden_state, the ids or None)`` as SGLang reads them; the ids come back as written
    (a caller that needs integers checks them: SGLang itself fails at start-up on anything else)."""
    use_aux: Any = True
    try:
        # arbitrary JSON: a missing or non-map value fails below and is swallowed, as in SGLang
        eagle_config: Any = cfg.get("eagle_config", None)
        use_aux = eagle_config.get("use_aux_hidden_state", True)
        ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
    except Exception:
        ids = None
    return bool(use_aux), ids


def read_ids(cfg: Mapping[str, Any]) -> IdsAsRead:
    use_aux, raw = eagle_config_as_read(cfg)
    declared, where = declared_ids(cfg)
    ids = declared if (raw is not None and where == "eagle_config") else None
    return IdsAsRead(ids=ids, use_aux=use_aux, declared=declared, declared_at=where)
