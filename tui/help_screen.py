"""Help: the keys, and what each number on the screen means."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP_TEXT = """\
[b]Keys[/b]
  [b]q[/b]           quit
  [b]p[/b]           freeze the display; data keeps being received; FROZEN is shown
  [b]r[/b]           record what the monitor receives to eagle3-top-DATE-TIME.mcap; r again stops
  [b]w[/b]           acceptance since start, over the last 60 s, over the last 10 s
  [b]↑ ↓ tab[/b]     select a source (one row per host:pid:rank)
  [b]?[/b]           this help (esc, ? or q closes it)

[b]Replay keys[/b] (eagle3-top --replay FILE)
  [b]p space[/b]     play / pause          [b], .[/b]   one event back / forward
  [b]← →[/b]         one second back / forward (shift: ten)
  [b]+ -[/b]         speed 0.25x .. 100x, then max        [b]g[/b]   go to a time or a percentage
  [b]0-9[/b]         go to 0%, 10%, .. 90%                [b]home end[/b]   start / end

[b]What the numbers mean[/b]
  [b]accept len[/b]  accept length per verify step = [b]accepted draft tokens + 1[/b] (the bonus
              token), as SGLang, vLLM and the EAGLE papers count it. SpecForge's
              simulated_acc_len omits the +1.
  [b]rate[/b]        accepted draft tokens / proposed draft tokens
  [b]uncond[/b]      unconditional per-position rate: P(position i accepted), over all
              drafts (vLLM's number)
  [b]cond[/b]        conditional: P(position i accepted | position i-1 accepted); compare
              with training acc_i, shown beside it (◂, red when 0.2 or more below)
  [b]histogram[/b]   request-steps per accept length (1 = only the bonus token)
  [b]steps/s[/b]     verify steps per second (one per batch); [b]tok/s[/b] committed tokens/s
  [b]proposals[/b]   latest step: rid, \\[accepted drafts], root (last committed token), the
              drafts ([green]accepted path[/green], [red]rejected[/red]), → the bonus token
  [b]missed[/b]      sequence numbers never received (lost in transit or too slow a reader)
  [b]dropped[/b]     events the tracer dropped itself (its queue was full)
  [b]TRACER PAUSED[/b] the server side: the tracer's pause file exists (EAGLE3_TOP_PAUSE_FILE),
              nothing is recorded (FROZEN is only this display)
  [b]tail rows[/b]   step rows the server threw away (a request that had already
              finished, under SGLang's overlap scheduler) and the tracer left out too
  [b]malformed[/b]   frames that did not decode; the last reason is shown
  [b]stale[/b]       no event from that source for more than 3 s
  [b]spec[/b]        effective config; [red]red[/red] = silently rewritten by the server
  [b]layers[/b]      capture layers, engine-native and canonical (output of 0-based block k,
              -1 = embeddings); "default (ids not read)" = the server ignored the
              draft config's aux layer ids and used its defaults
  [b]layer map[/b]   with --manifest: per slot, the trained layer, the served one, live vs
              training RMS and the direction (sketch) cosine; red = mismatch or drift
  [b]findings[/b]    stable codes (LAYER_MAP_MISMATCH, ...), the same `eagle3-top check` prints
  [b]probe[/b]       the last replayed training sample: served x trained slot similarity
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("question_mark", "close", "close"),
        Binding("q", "close", "close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(HELP_TEXT, id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
