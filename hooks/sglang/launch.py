"""``python -m eagle3_top.hooks.sglang.launch [--eagle3-top-publish ENDPOINT] <sglang server args>``

The second way in, for when SGLang's plugin loader will not run our entry point (the package is
only on ``PYTHONPATH`` rather than pip-installed, ``SGLANG_PLUGINS`` whitelists other plugins, or the
entry-point metadata is not visible in the scheduler's environment). It registers the hooks in this
process and hands SGLang's ``launch_server`` a scheduler entry function
(``run_scheduler_process`` below) that registers them again inside every spawned scheduler process
before running SGLang's own. HTTP server mode only (not gRPC / encoder-only / Ray).
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

from .plugin import ENV_PUBLISH, register

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5557"


def _apply_hooks() -> None:
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry
    except ImportError:
        return
    HookRegistry.apply_hooks()


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Top-level (picklable for spawn): install our hooks, then run SGLang's scheduler process."""
    register()
    _apply_hooks()
    from sglang.srt.managers.scheduler import run_scheduler_process as original

    return original(*args, **kwargs)


def split_own_args(argv: list[str]) -> tuple[list[str], str | None]:
    """Remove ``--eagle3-top-publish ENDPOINT`` / ``--eagle3-top-publish=ENDPOINT`` from argv."""
    out: list[str] = []
    endpoint = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--eagle3-top-publish" and i + 1 < len(argv):
            endpoint = argv[i + 1]
            i += 2
            continue
        if a.startswith("--eagle3-top-publish="):
            endpoint = a.split("=", 1)[1]
        else:
            out.append(a)
        i += 1
    return out, endpoint


def main(argv: list[str] | None = None) -> None:
    argv, endpoint = split_own_args(list(sys.argv[1:] if argv is None else argv))
    # spawned children inherit the environment, and re-parse sys.argv for the requested flags
    os.environ[ENV_PUBLISH] = endpoint or os.environ.get(ENV_PUBLISH) or DEFAULT_ENDPOINT
    sys.argv = [sys.argv[0], *argv]

    from sglang.srt.plugins import load_plugins

    load_plugins()
    register()
    _apply_hooks()

    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    server_args = prepare_server_args(argv)
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
    try:
        if "run_scheduler_process_func" in inspect.signature(launch_server).parameters:
            launch_server(server_args, run_scheduler_process_func=run_scheduler_process)
        else:  # an SGLang without the parameter: rely on the entry point in the children
            launch_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
