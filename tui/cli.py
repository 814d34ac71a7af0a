"""``eagle3-top``: the command line. Dispatches to ``tui/commands``; imports stay lazy, so the live
monitor starts without torch, and the built-in engine runs only in a process of its own."""

from __future__ import annotations

import sys

from .commands.args import COMMANDS

USAGE = """\
eagle3-top [--manifest M] [ENDPOINT ...]   live monitor (default tcp://127.0.0.1:5557)
eagle3-top check ENDPOINT --manifest M     headless verdict for a deploy pipeline (exit 0/1/2/3)
eagle3-top preflight --model-path T --speculative-draft-model-path D [--manifest M]   predict a server's wiring, no GPU
eagle3-top manifest build|show ...         the training manifest
eagle3-top probe --server URL --endpoint E --manifest M   replay training samples, compare aux rows
eagle3-top toy [...]                       run the built-in EAGLE-3 engine and publish its trace
eagle3-top keys DIR NAME                   write a CURVE certificate pair for remote tailing
eagle3-top demo                            two built-in engines (healthy, mis-wired) + the monitor
eagle3-top record ENDPOINT ... -o FILE     store every frame, as received, in an MCAP file
eagle3-top recording info FILE [--json]    what a recording holds, per source, and what of it was lost
eagle3-top dump FILE [--kind K] [--source S] [--since T] [--json]   the frames of a recording, one a line
eagle3-top serve-web [--host H] [--port P] [MONITOR ARGS ...]   the monitor in a browser (127.0.0.1:8557)
eagle3-top export --prometheus PORT ENDPOINT ...   Prometheus /metrics of what the monitor sees (127.0.0.1)
eagle3-top relay --bind E --connect E ... [--record FILE]   many publishers fanned into one endpoint
"""

EXIT_INTERRUPTED = 130
# The reader of our output went away (``--json | head``): what a process killed by SIGPIPE reports.
EXIT_PIPE = 141
# A command whose name is no Python identifier, and its module in tui/commands.
MODULES = {"serve-web": "serve_web"}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = args[0] if args else ""
    try:
        if cmd in COMMANDS:
            import importlib

            module = importlib.import_module(f"eagle3_top.tui.commands.{MODULES.get(cmd, cmd)}")
            code: int = module.main(args[1:])
            return code
        from .commands import live

        return live.main(args, USAGE)
    except KeyboardInterrupt:
        # Ctrl-C is the user's answer, not a crash: no traceback, the conventional status.
        print("eagle3-top: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # every command's output may be cut short by its reader: no traceback, for any of them
        from .commands.report import quiet_stdout

        quiet_stdout()
        return EXIT_PIPE


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
