"""``eagle3-top --replay FILE``: the live monitor's screens, fed from a recording, with the keys of
a player. Every panel is the live app's; only the feed and the keys differ."""

from __future__ import annotations

import os
import sys
from typing import ClassVar

from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.reader.replay import Timeline, parse_seek, speed_label
from eagle3_top.tracer.schema.text import printable
from textual.actions import SkipAction
from textual.binding import Binding, BindingType

from .app import Eagle3TopApp
from .config import REPLAY_INTERVAL_S, Config
from .replay_feed import ReplayFeed
from .seek_prompt import SeekPrompt
from .token_text import TokenText


class ReplayApp(Eagle3TopApp):
    REPLAY = True
    BINDINGS: ClassVar[list[BindingType]] = [
        *(
            b
            for b in Eagle3TopApp.BINDINGS
            if isinstance(b, Binding) and b.action not in ("toggle_record", "toggle_pause")
        ),
        # Textual merges a base class's bindings in: `r` is taken over here, and kept off the footer
        Binding("r", "toggle_record", "record", show=False),
        Binding("p", "toggle_pause", "play/pause"),  # not "pause": it plays the recording too
        Binding("space", "toggle_pause", "play/pause", show=False),
        Binding("full_stop", "step_events(1)", "+1 event", key_display="."),
        Binding("comma", "step_events(-1)", "-1 event", key_display=","),
        Binding("right", "step_seconds(1)", "+1s", key_display="→", priority=True),
        Binding("left", "step_seconds(-1)", "-1s", key_display="←", priority=True),
        Binding("shift+right", "step_seconds(10)", "+10s", show=False, priority=True),
        Binding("shift+left", "step_seconds(-10)", "-10s", show=False, priority=True),
        Binding("plus,equals_sign", "speed(1)", "faster", key_display="+"),
        Binding("minus", "speed(-1)", "slower", key_display="-"),
        Binding("j", "seek_prompt", "jump to"),  # g is the plots, as in the live monitor
        # priority: the focused sources table would take them to scroll; a view of its own (the
        # requests) keeps them (``action_seek_edge``)
        Binding("home", "seek_edge(0)", "start", show=False, priority=True),
        Binding("end", "seek_edge(1)", "end", show=False, priority=True),
        *(Binding(str(d), f"seek_fraction({d / 10})", f"{d * 10}%", show=False) for d in range(10)),
    ]

    def __init__(
        self,
        timeline: Timeline,
        *,
        manifest: Manifest | None = None,
        refresh_hz: float = 1.0 / REPLAY_INTERVAL_S,
        baseline_tok_s: float | None = None,
        tokenizer: TokenText | None = None,
        config: Config | None = None,
    ) -> None:
        self.timeline = timeline
        cfg = config or Config()
        super().__init__(
            [],
            title=f"eagle3-top replay {os.path.basename(timeline.path)}",
            manifest=manifest,
            feed=ReplayFeed(
                timeline,
                manifest=manifest,
                baseline_tok_s=baseline_tok_s,
                stale_after_s=cfg.thresholds.stale_after_s,
                thresholds=cfg.thresholds,
                internal_prefixes=cfg.internal_rid_prefixes,
            ),
            refresh_hz=refresh_hz,
            tokenizer=tokenizer,
            config=cfg,
        )

    def on_mount(self) -> None:
        super().on_mount()
        lines = self.timeline.damage()
        if lines:
            more = f" (and {len(lines) - 3} more)" if len(lines) > 3 else ""
            self.notify(
                "\n".join(printable(line, 300) for line in lines[:3]) + more,
                markup=False,
                title="part of the file was not read",
                severity="warning",
                timeout=20,
            )

    def _moved(self) -> None:
        """Show the new position now, not at the next tick."""
        self._tick()

    def action_toggle_record(self) -> None:
        self.notify("a replay records nothing new: the file is already the recording")

    def action_toggle_pause(self) -> None:
        playing = self.timeline.toggle()
        self.notify("playing" if playing else "paused", timeout=1)
        self._moved()

    def action_step_events(self, n: int) -> None:
        self.timeline.step_events(n)
        self._moved()

    def action_step_seconds(self, seconds: float) -> None:
        self.timeline.step_seconds(seconds)
        self._moved()

    def action_seek_fraction(self, fraction: float) -> None:
        self.timeline.seek_fraction(fraction)
        self._moved()

    def action_seek_edge(self, fraction: float) -> None:
        """Home / End: the start or the end of the recording, from the main screen; over it (the
        requests view, the help) the key goes to that view instead."""
        if self.screen is not self.screen_stack[0]:
            raise SkipAction()
        self.action_seek_fraction(fraction)

    def action_speed(self, steps: int) -> None:
        speed = self.timeline.faster(steps)
        self.notify(f"speed {speed_label(speed)}", timeout=1)
        self._moved()

    def action_seek_prompt(self) -> None:
        self.push_screen(SeekPrompt(), self._seek_to)

    def _seek_to(self, text: str | None) -> None:
        if not text:
            return
        try:
            how, value = parse_seek(text)
        except ValueError as exc:
            self.notify(str(exc), severity="error", markup=False)  # it quotes what was typed
            return
        if how == "fraction":
            self.timeline.seek_fraction(value)
        else:
            self.timeline.seek_time(value)
        self._moved()


def run_replay(
    timeline: Timeline,
    *,
    manifest: Manifest | None = None,
    refresh_hz: float = 1.0 / REPLAY_INTERVAL_S,
    baseline_tok_s: float | None = None,
    tokenizer: TokenText | None = None,
    config: Config | None = None,
) -> None:
    """Replay until the user quits (q / ctrl+c); then what the file lost, on stderr, where it stays."""
    ReplayApp(
        timeline,
        manifest=manifest,
        refresh_hz=refresh_hz,
        baseline_tok_s=baseline_tok_s,
        tokenizer=tokenizer,
        config=config,
    ).run()
    for line in timeline.damage():
        print(f"eagle3-top: {timeline.path}: {printable(line, 300)}", file=sys.stderr)
