"""``eagle3-top toy ...``: the built-in EAGLE-3 engine, always in a process of its own.

The engine (``eagle3_top.hooks.toy_main``) needs torch; the monitor and the other commands must not.
So no command imports it: ``toy`` replaces this process with the engine's, and ``demo`` starts
engines as children, both by module name.
"""

from __future__ import annotations

import os
import sys

ENGINE_MODULE = "eagle3_top.hooks.toy_main"


def engine_argv(args: list[str]) -> list[str]:
    """The command line that runs the built-in engine with ``args`` (``eagle3-top toy``'s own)."""
    return [sys.executable, "-m", ENGINE_MODULE, *args]


def main(argv: list[str]) -> int:
    """Become the engine: same pid, so signals and the exit status are the engine's own."""
    sys.stdout.flush()
    sys.stderr.flush()
    argv0 = engine_argv(argv)
    os.execv(argv0[0], argv0)
    return 0  # not reached
