"""``eagle3-top --once [--json]``: one snapshot of the monitor, printed, for scripts and logs.

Live, it listens for one interval (the hello comes at once on subscribing; steps as the server
makes them), or until Ctrl-C or SIGTERM ends the listening early, as ``ping`` prints its statistics
(a script can listen for as long as its benchmark runs, then ask); it judges every source on what it
saw and prints; with ``--replay FILE``, the snapshot at the end of the recording. Exit 0 with at
least one source, 3 when none was heard."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tracer.schema.text import printable
from eagle3_top.tracer.transport.curve import CurveClient
from eagle3_top.tui.config import LIVE_INTERVAL_S

from .report import EXIT_OK, EXIT_PARTIAL, quiet_stdout
from .stop_signal import StopSignal

if TYPE_CHECKING:
    from eagle3_top.tui.snapshot import Snapshot
    from eagle3_top.tui.token_text import TokenText

ONCE_INTERVAL_S = LIVE_INTERVAL_S  # how long --once listens when -i does not say
RECENT = (10, 60)  # the windows --json reports beside since-start


def once_live(
    endpoints: list[str],
    manifest: Manifest | None,
    curve: CurveClient | None,
    interval_s: float,
    as_json: bool,
    baseline_tok_s: float | None = None,
    tokenizer: TokenText | None = None,
) -> int:
    from eagle3_top.tracer.reader.subscriber import Subscriber
    from eagle3_top.tui.feed import Feed

    feed = Feed(
        endpoints,
        manifest=manifest,
        subscriber_factory=lambda eps: Subscriber(eps, curve=curve),
        baseline_tok_s=baseline_tok_s,
    )
    feed.start()
    try:
        with StopSignal() as stop:  # Ctrl-C or SIGTERM: print what was heard so far
            stop.wait(interval_s)
        feed.settle_findings()
        snap = feed.snapshot(windows=RECENT if as_json else ())
    finally:
        feed.stop()
    return _print(snap, manifest, as_json, tokenizer)


def once_replay(
    timeline: Timeline,
    manifest: Manifest | None,
    as_json: bool,
    baseline_tok_s: float | None = None,
    tokenizer: TokenText | None = None,
) -> int:
    """The snapshot at the end of the recording; what the file lost goes to stderr, as `dump` says it."""
    from eagle3_top.tui.replay_feed import ReplayFeed

    feed = ReplayFeed(timeline, manifest=manifest, baseline_tok_s=baseline_tok_s)
    feed.run_to_end()
    feed.settle_findings(timeline.now())
    code = _print(feed.snapshot(windows=RECENT if as_json else ()), manifest, as_json, tokenizer)
    for line in timeline.damage():
        print(f"eagle3-top: {timeline.path}: {printable(line, 300)}", file=sys.stderr)
    return code


def _print(snap: Snapshot, manifest: Manifest | None, as_json: bool, tokenizer: TokenText | None) -> int:
    from eagle3_top.tui.snapshot_json import snapshot_json
    from eagle3_top.tui.tokenizer_shelf import TokenizerShelf

    # --tokenizer, else each source's beside its model, read now: this command prints and exits
    tokenizers = TokenizerShelf(tokenizer, background=False)

    try:
        if as_json:
            print(json.dumps(snapshot_json(snap, manifest, tokenizers), indent=1, allow_nan=False))
        else:  # rich, for the text only: --json runs where no UI library is installed (a GPU box)
            from eagle3_top.tui.snapshot_text import snapshot_text

            print(snapshot_text(snap, tokenizers))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader had enough (`| head`)
        quiet_stdout()
    return EXIT_OK if snap.sources else EXIT_PARTIAL
