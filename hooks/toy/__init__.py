"""The built-in toy EAGLE-3 engine: a small Llama-style target, an EAGLE-3 draft, a greedy chain
draft/verify loop mirroring SGLang's data classes, the training script and bundled weights.

Modules: ``workload`` (token language), ``model`` (target), ``draft`` (EAGLE-3 draft),
``spec_args`` (SGLang's speculative flags and rules), ``engine`` (the loop), ``train``, ``paths``.
"""
