"""vLLM's rules (``Engine``): where it reads a draft's layer ids, how it captures them, what its
speculative config does to the flags, and the releases eagle3-top knows."""

from __future__ import annotations

from .engine import ENGINE, VLLM

__all__ = ["ENGINE", "VLLM"]
