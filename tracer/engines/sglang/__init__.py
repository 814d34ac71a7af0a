"""What eagle3-top knows about SGLang, from SGLang's own code: see ``engine``."""

from eagle3_top.tracer.engines.sglang.engine import ENGINE, SGLang

__all__ = ["ENGINE", "SGLang"]
