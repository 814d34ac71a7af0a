"""The plots screen (``g``): accept length over time per source against training's expectation,
the selected source's per-position acceptance against training acc_i, and the probe's similarity
matrix as a heat map.

Drawn as rich text in Textual's own ``Static`` (braille lines, block bars, coloured cells), not
with textual-plotext: plotext draws no heat map with the values in its cells, keeps its figure in
module state, and lays out its own axes and legend, so the small-terminal fallbacks here (one
legend line, reference labels dropped, panels stacked) could not be had; and what each widget
plots stays plain data that a test reads. One dependency fewer, too.

The app hands it each snapshot it shows (``Eagle3TopApp._render_screen``, as to every screen over
the main one), and it draws the source selected there: one snapshot, one selection, so the two
screens never disagree; while it is closed nothing of it exists and nothing is drawn for it.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, cast

from eagle3_top.tracer.analysis.manifest import Manifest
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.screen import Screen
from textual.widgets import Footer

from .accept_plot import AcceptPlot
from .feed import Feed
from .position_plot import PositionPlot
from .probe_heatmap import ProbeHeatmap
from .snapshot import Snapshot, SourceSnapshot
from .status_bar import StatusBar


class _Monitor(Protocol):
    """What the screen reads of the app (``Eagle3TopApp``, which imports this module)."""

    selected: str | None
    paused: bool
    render_error: str | None
    feed: Feed


class PlotsScreen(Screen[None]):
    # below 72 columns the bars and the heat map no longer fit side by side: one above the other
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-wide")]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "close", "back"),
        Binding("escape", "close", "back", show=False),
    ]
    DEFAULT_CSS = """
    PlotsScreen { layout: vertical; }
    #plots-status { height: 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    #accept-plot, #position-plot { text-wrap: nowrap; text-overflow: ellipsis; }
    #accept-plot { height: 3fr; min-height: 6; padding: 0 1; overflow: hidden; }
    #plots-bottom { layout: horizontal; height: 2fr; min-height: 7; border-top: hkey $primary 50%; }
    #position-plot { width: 1fr; height: 100%; padding: 0 1; overflow: hidden; }
    #probe-heatmap {
        width: 36; height: 100%; padding: 0 1; overflow: hidden; border-left: vkey $primary 50%;
    }
    PlotsScreen.-narrow #plots-bottom { layout: vertical; height: 3fr; }
    PlotsScreen.-narrow #position-plot { width: 100%; height: 1fr; }
    PlotsScreen.-narrow #probe-heatmap {
        width: 100%; height: 1fr; border-left: none; border-top: hkey $primary 30%;
    }
    """

    def __init__(self, title: str, manifest: Manifest | None) -> None:
        super().__init__()
        self.manifest = manifest
        self.status_bar = StatusBar(title, id="plots-status")
        self.accept_plot = AcceptPlot(id="accept-plot")
        self.position_plot = PositionPlot(id="position-plot")
        self.heatmap = ProbeHeatmap(id="probe-heatmap")

    def compose(self) -> ComposeResult:
        yield self.status_bar
        yield self.accept_plot
        with Container(id="plots-bottom"):
            yield self.position_plot
            yield self.heatmap
        yield Footer()

    def update_from(self, snap: Snapshot) -> None:
        app = cast(_Monitor, self.app)
        src: SourceSnapshot | None = snap.source(app.selected)
        if src is None and snap.sources:  # as the main screen's panels: the first source
            src = snap.sources[0]
        # the main screen's top line, so that FROZEN, the window and a replay's scrubber stay in sight
        self.status_bar.update_from(snap, app.paused, app.feed.error or app.render_error, app.feed.position())
        self.accept_plot.update_from(snap, self.manifest)
        self.position_plot.update_from(src)
        self.heatmap.update_from(src, self.manifest is not None)

    def action_close(self) -> None:
        self.dismiss(None)
