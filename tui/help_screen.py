"""Help: the keys, and what each number on the screen means."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# The keys of both modes; each mode adds its own (a replay has no FROZEN display and records nothing:
# its p plays and pauses the recording, in the replay section).
COMMON_KEYS = """\
[b]Keys[/b]
  [b]q[/b]          quit
{mode_keys}\
  [b]w[/b]          acceptance since start, over the last 60 s, the last 10 s
  [b]↑ ↓ tab[/b]    select a source (one row per host:pid:rank)
  [b]enter[/b]      the selected source's requests (below)
  [b]f[/b]          every finding with its evidence, fix and docs section;
             [b]c[/b] there copies them as plain text
  [b]g[/b]          plots: accept length over time against training's
             expected value, per-position rates beside training acc_i,
             the probe's similarity matrix as a heat map
  [b]F[/b]          the fleet (more than one source): merged figures,
             sources worst first, findings by code, restarts, stale;
             worst = worst finding (error, warning, info, none), then
             accept length / training's expected, then accept length
  [b]/[/b]          pick a source by typing (key, engine, model); enter
  [b]t[/b]          light / dark theme
  [b]?[/b]          this help (esc, ? or q closes it; ↑ ↓ scroll)
  [b]esc[/b]        back from any view

[b]Requests view[/b] (enter on a source)
  [b]s[/b] sort (running first, tokens, accept length, last, age)  [b]S[/b] reverse
  [b]/[/b] filter by rid    [b]i[/b] show SGLang's own (HEALTH_CHECK) requests
  [b]home end[/b]   the first / the last request
  [b]enter[/b]      a request's timeline: its accept length per step, and
             its drafts step by step (accepted green, rejected red)

{mode_section}\
"""

LIVE_KEYS = """\
  [b]p[/b]          freeze the display (FROZEN); data keeps being received
  [b]r[/b]          record what arrives to eagle3-top-DATE-TIME.mcap; r stops
"""


REPLAY_SECTION = """\
[b]Replay keys[/b] (eagle3-top --replay FILE; on the main screen)
  [b]p space[/b]    play / pause           [b], .[/b]   one event back / forward
  [b]← →[/b]        one second back / forward (shift: ten)
  [b]+ -[/b]        speed 0.25x .. 100x, then max
  [b]j[/b]          jump to a time or a percentage
  [b]0-9[/b]        go to 0%, 10%, .. 90%   [b]home end[/b]   start / end

"""

NUMBERS = """\
[b]What the numbers mean[/b]
  [b]accept len[/b] per verify step: [b]accepted draft tokens + 1[/b] (the bonus
             token), as SGLang, vLLM and the EAGLE papers count it;
             SpecForge's simulated_acc_len omits the +1
  [b]rate[/b]       accepted draft tokens / proposed draft tokens
  [b]uncond[/b]     P(position i accepted), over all drafts (vLLM's number)
  [b]cond[/b]       P(position i accepted | i-1 accepted); compare with
             training acc_i beside it (◂, red when far below)
  [b]histogram[/b]  request-steps per accept length (1 = only the bonus)
  [b]steps/s[/b]    verify steps per second; [b]tok/s[/b] committed tokens/s
  [b]proposals[/b]  latest step: rid, \\[accepted drafts], root, the drafts
             ([green]accepted path[/green], [red]rejected[/red]), → the bonus token; as text
             with a tokenizer (· space, ⏎ newline, ⇥ tab), else ids
  [b]missed[/b]     sequence numbers never received (transit, slow reader)
  [b]dropped[/b]    events the tracer dropped itself (its queue was full)
  [b]TRACER PAUSED[/b] the server's pause file exists (EAGLE3_TOP_PAUSE_FILE):
             nothing is recorded; FROZEN is only this display
  [b]tail rows[/b]  step rows the server threw away (finished requests under
             SGLang's overlap scheduler), left out by the tracer too
  [b]malformed[/b]  frames that did not decode; the last reason is shown
  [b]stale[/b]      no event from the source for a while (3 s by default)
  [b]spec[/b]       effective config; [red]red[/red] = silently rewritten by the server
  [b]layers[/b]     capture layers, engine-native and canonical (output of
             0-based block k, -1 = embeddings); "default (ids not
             read)": the server ignored the draft's aux layer ids
  [b]layer map[/b]  with --manifest, per slot: trained vs served layer, live
             vs training RMS, direction cosine; red = mismatch/drift
  [b]findings[/b]   stable codes (LAYER_MAP_MISMATCH, ...), as `check` prints
  [b]probe[/b]      the last replayed training sample: served x trained
             slot similarity
"""


def help_text(replay: bool = False) -> str:
    """The help of the live monitor, or of a replay: only the keys that mode has."""
    keys = COMMON_KEYS.format(
        mode_keys="" if replay else LIVE_KEYS, mode_section=REPLAY_SECTION if replay else ""
    )
    return keys + NUMBERS


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("question_mark", "close", "close"),
        Binding("q", "close", "close"),
    ]

    def __init__(self, replay: bool = False) -> None:
        super().__init__()
        self.replay = replay

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_text(self.replay), id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
