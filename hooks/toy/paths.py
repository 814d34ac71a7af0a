"""Where the bundled toy weights live."""

from __future__ import annotations

import os

WEIGHTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights")


def weights_dir() -> str:
    return WEIGHTS_DIR


def target_dir() -> str:
    """The toy target (``LlamaForCausalLM``-like, 8 layers, hidden 128)."""
    return os.path.join(WEIGHTS_DIR, "target")


def draft_dir() -> str:
    """The correct draft: ids ``[-1, 2, 5]`` nested under ``eagle_config`` (SGLang reads them)."""
    return os.path.join(WEIGHTS_DIR, "draft")


def draft_ids_not_read_dir() -> str:
    """Same draft weights, ids at the config's top level only: SGLang ignores them and the target
    captures its defaults ``[2, 4, 5]`` native = canonical ``[1, 3, 4]`` (the motivating bug)."""
    return os.path.join(WEIGHTS_DIR, "draft-ids-not-read")


def draft_no_embed_dir() -> str:
    """The second draft: ids ``[0, 2, 5]``, no embedding slot (which SGLang 0.5.17-0.5.21 mishandle);
    still apart from SGLang's default layers, so its mis-wired copy is named by the layer findings.
    Its acceptance barely drops (3.81 -> 3.73 on the built-in workload): neighbouring blocks carry
    similar states. The collapse of ``draft-ids-not-read`` (1.17) comes from its embedding slot."""
    return os.path.join(WEIGHTS_DIR, "draft-no-embed")


def draft_no_embed_ids_not_read_dir() -> str:
    """``draft-no-embed``'s weights with its ids at the config's top level, where SGLang never reads them."""
    return os.path.join(WEIGHTS_DIR, "draft-no-embed-ids-not-read")
