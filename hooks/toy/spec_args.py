"""SGLang's speculative-decoding flags and their resolution rules, for the toy engine.

Mirrors SGLang 0.5.23 ``srt/arg_groups/speculative_hook.py::_handle_eagle_family`` and
``model_executor/model_runner_components/spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state``:
ids are read only from the draft config's nested ``eagle_config``, silently; with topk 1 the draft-token
count is forced to ``num_steps + 1``; without ``--speculative-num-steps`` all three are auto-chosen.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field

# SGLang's flag rules live in the library: preflight predicts a server's flags by the same ones.
from eagle3_top.tracer.engines.base import SpecArgs
from eagle3_top.tracer.engines.sglang.flags import (
    ALGORITHMS,
    NO_SPECULATION,
    TOPK1_REASON,
    TOPK1_SGLANG_WARNING,
    auto_choose_speculative_params,
    resolve_spec_args,
)
from eagle3_top.tracer.engines.sglang.ids import eagle_config_as_read

__all__ = [
    "ALGORITHMS",
    "NO_SPECULATION",
    "TOPK1_REASON",
    "TOPK1_SGLANG_WARNING",
    "ServerArgs",
    "SpecArgs",
    "auto_choose_speculative_params",
    "resolve_spec_args",
]


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
    use_aux, ids = eagle_config_as_read(_load_json(draft_dir) or {})
    return use_aux, (list(ids) if ids is not None else None)


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
