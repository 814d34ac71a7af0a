"""``eagle3-top recording SUBCOMMAND``: commands about a recording file as a whole (``info``)."""

from __future__ import annotations

from .report import EXIT_OK, fail

PROG = "eagle3-top recording"
USAGE = "usage: eagle3-top recording info FILE [--json]"
SUBCOMMANDS = ("info",)


def main(argv: list[str]) -> int:
    if not argv:
        return fail(PROG, f"needs a subcommand ({USAGE})")
    if argv[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n  info   what a recording holds per source, its drops, and what of it was lost")
        return EXIT_OK
    if argv[0] not in SUBCOMMANDS:
        return fail(PROG, f"unknown subcommand '{argv[0]}' (expected: {', '.join(SUBCOMMANDS)})")
    from . import recording_info

    return recording_info.main(argv[1:])
