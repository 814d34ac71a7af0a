"""The vLLM adapter: a general plugin (entry point group ``vllm.general_plugins``) that publishes the
same stream as the SGLang adapter from vLLM's worker (``plugin``), built from the live model runner
(``wiring``), its verify steps (``steps``) and the aux states its drafter consumes (``aux``)."""
