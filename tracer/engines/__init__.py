"""The serving engines eagle3-top knows, by the name their hellos carry.

A new engine is a package under ``tracer/engines/`` whose module-level ``ENGINE`` implements
:class:`~eagle3_top.tracer.engines.base.Engine`, plus one line in ``REGISTRY``.
"""

from __future__ import annotations

import importlib

from eagle3_top.tracer.engines.base import Engine

REGISTRY: dict[str, str] = {
    "sglang": "eagle3_top.tracer.engines.sglang",
    "toy": "eagle3_top.tracer.engines.toy",
    "vllm": "eagle3_top.tracer.engines.vllm",
}


def engine(name: str | None) -> Engine | None:
    """The engine registered under ``name`` (a hello's engine name); None for one we do not know."""
    if name not in REGISTRY:
        return None
    found: Engine = importlib.import_module(REGISTRY[name]).ENGINE
    return found


def names() -> list[str]:
    return sorted(REGISTRY)


__all__ = ["Engine", "REGISTRY", "engine", "names"]
