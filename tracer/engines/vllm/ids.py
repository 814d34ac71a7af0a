"""Where vLLM reads a draft's aux layer ids (``GPUModelRunner._get_eagle3_aux_layers_from_config``,
``v1/worker/gpu_model_runner.py``, 0.32): the **top-level** ``eagle_aux_hidden_state_layer_ids``
first; only when that is absent or empty, ``eagle_config``'s (SpecForge's place, which SGLang reads).
An empty or missing list gives ``None`` and the target's default layers. vLLM has no
``use_aux_hidden_state`` switch on the target side: an EAGLE-3 draft always gets the aux states
(the draft's own ``use_aux_hidden_state: false`` only makes its ``combine_hidden_states`` skip
the ``fc``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle3_top.tracer.engines.base import MAX_IDS, IdsAsRead

KEY = "eagle_aux_hidden_state_layer_ids"  # read at the config's top level first


def _ids(v: Any) -> list[int] | None:
    # vLLM takes any non-empty list or tuple; one of anything but integers cannot name layers
    if isinstance(v, (list, tuple)) and v and len(v) <= MAX_IDS and all(type(x) is int for x in v):
        return list(v)
    return None


def read_ids(cfg: Mapping[str, Any]) -> IdsAsRead:
    ec = cfg.get("eagle_config")
    use_aux = not (isinstance(ec, Mapping) and ec.get("use_aux_hidden_state") is False)
    top = _ids(cfg.get(KEY))
    if top is not None:
        return IdsAsRead(ids=top, use_aux=use_aux, declared=top, declared_at="top_level")
    nested = _ids(ec.get(KEY)) if isinstance(ec, Mapping) else None
    if nested is not None:
        return IdsAsRead(ids=nested, use_aux=use_aux, declared=nested, declared_at="eagle_config")
    return IdsAsRead(ids=None, use_aux=use_aux, declared=None, declared_at="missing")
