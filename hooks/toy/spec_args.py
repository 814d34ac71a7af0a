"""SGLang's speculative-decoding flags and their resolution rules, for the toy engine.

Mirrors SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py::_handle_eagle_family`` and
``model_executor/model_runner_components/spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state``:
ids are read only from the draft config's nested ``eagle_config``, silently; with topk 1 the draft-token
count is forced to ``num_steps + 1``; without ``--speculative-num-steps`` all three are auto-chosen.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

ALGORITHMS = ("EAGLE3", "EAGLE")
# SGLang's SpeculativeAlgorithm.NONE: the target decodes alone, one token per request per step (the
# baseline speculation is measured against); the other speculative flags are ignored, as SGLang does.
NO_SPECULATION = "NONE"
TOPK1_REASON = "topk=1 forces num_draft_tokens = num_steps + 1"
TOPK1_SGLANG_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
)


@dataclass
class SpecArgs:
    algorithm: str = "EAGLE3"
    num_steps: int | None = 3
    topk: int | None = 1
    num_draft_tokens: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ServerArgs:
    """What the engine was asked for and what it runs with (read by the tracer)."""

    model_path: str
    speculative_draft_model_path: str | None  # None without speculation: no draft is loaded
    requested: SpecArgs
    effective: SpecArgs
    rewrites: list[dict] = field(default_factory=list)
    batch_size: int = 8
    max_new_tokens: int = 96
    prompt_len: int = 48
    seed: int = 0

    @property
    def speculative_algorithm(self) -> str:
        return self.effective.algorithm

    @property
    def speculative_num_steps(self) -> int:
        assert self.effective.num_steps is not None  # set by resolve_spec_args
        return self.effective.num_steps

    @property
    def speculative_eagle_topk(self) -> int:
        assert self.effective.topk is not None  # set by resolve_spec_args
        return self.effective.topk

    @property
    def speculative_num_draft_tokens(self) -> int:
        assert self.effective.num_draft_tokens is not None  # set by resolve_spec_args
        return self.effective.num_draft_tokens


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
        eff.topk = 1
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


def _load_json(draft_dir: str) -> dict | None:
    try:
        with open(os.path.join(draft_dir, "config.json")) as f:
            cfg = json.load(f)
        return cfg if isinstance(cfg, dict) else None
    except Exception:
        return None


def read_eagle_config(draft_dir: str) -> tuple[bool, list[int] | None]:
    """``(use_aux_hidden_state, aux layer ids or None)`` read exactly like SGLang: only the nested
    ``eagle_config.eagle_aux_hidden_state_layer_ids``; any failure gives ``None`` silently while
    ``use_aux_hidden_state`` stays True unless ``eagle_config`` says otherwise."""
    cfg = _load_json(draft_dir) or {}
    use_aux = True
    try:
        # arbitrary JSON: a missing/non-dict value fails below and is swallowed, as in SGLang
        eagle_config: Any = cfg.get("eagle_config", None)
        use_aux = eagle_config.get("use_aux_hidden_state", True)
        ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
    except Exception:
        ids = None
    return bool(use_aux), (list(ids) if ids is not None else None)


def read_aux_layer_ids(draft_dir: str) -> list[int] | None:
    """The aux layer ids SGLang would hand the target (``None`` = it falls back to its defaults)."""
    return read_eagle_config(draft_dir)[1]


def add_toy_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from .paths import draft_dir, target_dir

    g = parser.add_argument_group("toy engine (SGLang-compatible speculative flags)")
    g.add_argument("--model-path", default=target_dir(), help="target model directory")
    g.add_argument(
        "--speculative-algorithm",
        default="EAGLE3",
        choices=[*ALGORITHMS, NO_SPECULATION],
        help="NONE: no speculation, the target alone (a baseline to record for --baseline-from)",
    )
    g.add_argument(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        default=draft_dir(),
        help="draft model directory (default: the bundled correctly-wired draft)",
    )
    g.add_argument("--speculative-num-steps", type=int, default=3)
    g.add_argument("--speculative-eagle-topk", type=int, default=1)
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--max-new-tokens", type=int, default=96)
    g.add_argument("--prompt-len", type=int, default=48)
    g.add_argument("--num-prompts", type=int, default=None, help="workload size (default: endless)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-steps", type=int, default=None, help="stop after this many decode steps")
    return parser


def spec_args_from_ns(ns: argparse.Namespace) -> SpecArgs:
    return SpecArgs(
        ns.speculative_algorithm,
        ns.speculative_num_steps,
        ns.speculative_eagle_topk,
        ns.speculative_num_draft_tokens,
    )
