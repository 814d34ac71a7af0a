"""SGLang's rules for its speculative-decoding flags: what it silently changes (``_handle_eagle_family``
in ``srt/arg_groups/speculative_hook.py``, 0.5.23; 0.5.17 rewrites the same way in
``ServerArgs.__post_init__``). Shared by the built-in engine, which serves by them, and ``preflight``,
which predicts a server's flags; tests/test_sglang_preflight.py holds them against SGLang's own
argument resolution.
"""

from __future__ import annotations

import dataclasses

from eagle3_top.tracer.engines.base import SpecArgs

ALGORITHMS = ("EAGLE3", "EAGLE")
# SGLang's SpeculativeAlgorithm.NONE: the target decodes alone, one token per request per step (the
# baseline speculation is measured against); the other speculative flags are ignored, as SGLang does.
NO_SPECULATION = "NONE"
TOPK1_REASON = "topk=1 forces num_draft_tokens = num_steps + 1"
TOPK1_SGLANG_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
)


def auto_choose_speculative_params(target_arch: str | None) -> tuple[int, int, int]:
    """SGLang's ``_auto_choose_speculative_params``, keyed on the target architecture (subset)."""
    if target_arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1ModelForCausalLM"):
        return 5, 4, 8
    return 3, 1, 4


def resolve_spec_args(requested: SpecArgs, target_arch: str | None) -> tuple[SpecArgs, list[dict]]:
    """Apply SGLang's silent adjustments. Returns ``(effective, rewrites)``; each rewrite is
    ``{"param", "from", "to", "reason"}``."""
    if requested.algorithm == NO_SPECULATION:
        return SpecArgs(NO_SPECULATION, None, None, None), []
    eff = dataclasses.replace(requested)
    rewrites: list[dict] = []
    if eff.algorithm not in ALGORITHMS:
        choices = (*ALGORITHMS, NO_SPECULATION)
        raise ValueError(f"--speculative-algorithm must be one of {choices}, got {eff.algorithm!r}")
    if eff.num_steps is None:
        if eff.topk is not None or eff.num_draft_tokens is not None:
            raise ValueError(
                "--speculative-eagle-topk / --speculative-num-draft-tokens given without "
                "--speculative-num-steps: SGLang fails here with a bare AssertionError "
                "(assert speculative_eagle_topk is None and speculative_num_draft_tokens is None); "
                "pass --speculative-num-steps too"
            )
        steps, topk, ndt = auto_choose_speculative_params(target_arch)
        reason = f"not given: SGLang auto-chooses (steps, topk, draft tokens) = ({steps}, {topk}, {ndt}) for {target_arch}"
        for name, val in (("num_steps", steps), ("topk", topk), ("num_draft_tokens", ndt)):
            rewrites.append({"param": name, "from": None, "to": val, "reason": reason})
        eff.num_steps, eff.topk, eff.num_draft_tokens = steps, topk, ndt
    if eff.topk is None:
        # SGLang (0.5.17 and 0.5.23 alike) sets no default here: its own check compares None with 1
        # and the server does not start (tests/test_sglang_preflight.py runs that code on CPU)
        raise ValueError(
            "--speculative-num-steps without --speculative-eagle-topk: SGLang fails at start-up "
            "(TypeError: '>' not supported between 'NoneType' and 'int'); pass --speculative-eagle-topk "
            "(1 for a chain)"
        )
    if eff.num_steps < 1:
        raise ValueError("--speculative-num-steps must be >= 1")
    if eff.topk < 1:
        raise ValueError("--speculative-eagle-topk must be >= 1")
    if eff.topk == 1 and eff.num_draft_tokens != eff.num_steps + 1:
        if eff.num_draft_tokens is not None:
            rewrites.append(
                {
                    "param": "num_draft_tokens",
                    "from": eff.num_draft_tokens,
                    "to": eff.num_steps + 1,
                    "reason": TOPK1_REASON,
                }
            )
        eff.num_draft_tokens = eff.num_steps + 1
    if eff.num_draft_tokens is None:
        raise ValueError("--speculative-num-draft-tokens is required when --speculative-eagle-topk > 1")
    return eff, rewrites
