"""eagle3-top live view: one screen, readable at 100×30.

Data flow: a ``Feed`` thread receives and aggregates; a timer here pulls a ``Snapshot`` a few times
a second and hands each widget the part it draws. No message per event ever reaches the UI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.transport.curve import CurveClient
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer

from .acceptance_panel import AcceptancePanel
from .config import LIVE_INTERVAL_S, THEMES, Config
from .feed import Feed
from .feed_recording import default_name
from .findings_panel import FindingsPanel
from .findings_screen import FindingsScreen
from .fleet import fleet_summary
from .fleet_headline import FleetHeadline
from .fleet_screen import FleetScreen
from .health_panel import HealthPanel
from .help_screen import HelpScreen
from .histogram import Histogram
from .layer_map import LayerMap
from .plots_screen import PlotsScreen
from .position_bars import PositionBars
from .probe_panel import ProbePanel
from .proposals import Proposals
from .requests_screen import RequestsScreen
from .snapshot import STALE_AFTER_S, WINDOWS, Snapshot, SourceSnapshot, window_label
from .source_picker import SourcePicker
from .sources_table import SourcesTable
from .spec_panel import SpecPanel
from .status_bar import StatusBar
from .timeline_screen import TimelineScreen
from .token_text import TokenText
from .tokenizer_shelf import TokenizerShelf

NARROW, SHORT, TALL = 100, 30, 40  # columns and lines of the size classes


class Eagle3TopApp(App[None]):
    CSS_PATH = "app.tcss"
    REPLAY = False  # the help lists the keys of the mode it is in
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("p", "toggle_pause", "pause"),
        Binding("r", "toggle_record", "record"),
        Binding("w", "next_window", "window"),
        Binding("f", "findings", "findings"),
        Binding("t", "toggle_theme", "light/dark", show=False),
        Binding("g", "plots", "plots"),
        Binding("F", "fleet", "fleet", show=False),  # advertised by the fleet headline
        Binding("slash", "pick_source", "pick source", key_display="/", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("tab", "next_source", "next source", priority=True),
        Binding("shift+tab", "prev_source", "prev source", show=False, priority=True),
    ]

    def __init__(
        self,
        endpoints: list[str],
        *,
        title: str = "eagle3-top",
        on_exit: Iterable[Callable[[], object]] = (),
        refresh_hz: float = 1.0 / LIVE_INTERVAL_S,
        stale_after_s: float = STALE_AFTER_S,
        manifest: Manifest | None = None,
        feed: Feed | None = None,
        curve: CurveClient | None = None,
        record_dir: str = ".",
        baseline_tok_s: float | None = None,
        tokenizer: TokenText | None = None,
        config: Config | None = None,
    ) -> None:
        super().__init__()
        self.config = cfg = config or Config()
        self.theme = THEMES[cfg.theme]
        self.endpoints = list(endpoints)
        self.title = title
        self._on_exit = list(on_exit)
        self._refresh_s = 1.0 / max(refresh_hz, 0.1)
        self.manifest = manifest
        self.feed = feed or Feed(
            self.endpoints,
            manifest=manifest,
            stale_after_s=cfg.thresholds.stale_after_s if config is not None else stale_after_s,
            subscriber_factory=lambda eps: Subscriber(eps, curve=curve),
            baseline_tok_s=baseline_tok_s,
            thresholds=cfg.thresholds,
            internal_prefixes=cfg.internal_rid_prefixes,
        )
        self.paused = False
        self.window_s: int | None = None  # acceptance over the last so many seconds; None: since start
        self.latest: Snapshot | None = None  # newest snapshot pulled from the feed
        self.shown: Snapshot | None = None  # what the screen shows (frozen while paused)
        self.selected: str | None = None
        self.ticks = 0
        self.render_error: str | None = None
        self.record_dir = record_dir
        # --tokenizer for every source, else each source's own beside its model (tokenizer_shelf.py)
        self.tokenizers = TokenizerShelf(tokenizer)

    # -- layout ----------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Kept as attributes: queries go to the *active* screen, which is the help screen at times.
        self.status_bar = StatusBar(self.title, id="status")
        self.fleet_headline = FleetHeadline(id="fleet-headline")
        self.table = SourcesTable(id="sources")
        self.spec = SpecPanel(id="spec")
        self.acceptance = AcceptancePanel(id="acceptance")
        self.positions = PositionBars(id="positions")
        self.histogram = Histogram(id="histogram")
        self.proposals = Proposals(self.tokenizers, id="proposals")
        self.health = HealthPanel(id="health")
        self.layer_map = LayerMap(id="layer-map")
        self.probe = ProbePanel(id="probe")
        self.findings = FindingsPanel(has_manifest=self.manifest is not None, id="findings")
        yield self.status_bar
        yield self.fleet_headline
        yield self.table
        with Horizontal(id="detail"):
            with Vertical(id="left"):
                yield self.spec
                yield self.acceptance
            with Vertical(id="right"):
                yield self.positions
                if self.manifest is None:
                    yield self.histogram
                else:  # the probe heat map shares the histogram's row
                    with Horizontal(id="hist-probe"):
                        yield self.histogram
                        yield self.probe
        if self.manifest is not None:
            yield self.layer_map
        yield self.findings
        yield self.proposals
        yield self.health
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        self._width_class(event.size.width, event.size.height)

    def _width_class(self, width: int, height: int) -> None:
        """A layout per size class: narrow (< 100 columns) drops table columns and side panels'
        extras; short (< 30 lines) drops the panels the plots also draw; tall (>= 40 lines) gives
        the sources table more rows."""
        main = self.screen_stack[0] if self.screen_stack else None
        if main is None:
            return
        main.set_class(width < NARROW, "-narrow")
        main.set_class(height < SHORT, "-short")
        main.set_class(height >= TALL, "-tall")
        self.table.set_compact(width < NARROW)

    def on_mount(self) -> None:
        self._width_class(self.size.width, self.size.height)
        self.feed.start()
        self.table.focus()
        self._tick()
        self.set_interval(self._refresh_s, self._tick, name="snapshot")

    def on_unmount(self) -> None:
        self.feed.stop()
        for cb in self._on_exit:
            try:
                cb()
            except Exception:
                pass

    # -- refresh ---------------------------------------------------------------------------------

    def _tick(self) -> None:
        if self._exit or not self.table.is_mounted:
            return
        self.ticks += 1
        try:
            self.latest = self.feed.snapshot(
                window_s=self.window_s, requests_for=self._requests_for(), timeline_for=self._timeline_for()
            )
            if not self.paused:
                self.shown = self.latest
            self._render_shown()
            self.render_error = None
        except Exception as exc:  # odd data must not take the monitor down; say what broke
            self.render_error = f"display error: {type(exc).__name__}: {exc}"
            self.log.error(self.render_error)
            try:
                self.status_bar.update_from(self.shown, self.paused, self.render_error)
            except Exception:
                pass

    def _requests_for(self) -> str | None:
        """The source whose requests a screen on the stack shows (only that table is copied out)."""
        for scr in self.screen_stack:
            if isinstance(scr, (RequestsScreen, TimelineScreen)):
                return scr.key
        return None

    def _timeline_for(self) -> tuple[str, str] | None:
        for scr in self.screen_stack:
            if isinstance(scr, TimelineScreen):
                return scr.key, scr.rid
        return None

    def _render_screen(self, snap: Snapshot) -> None:
        """A screen over the main one (requests, a timeline) draws from the same snapshot."""
        update = getattr(self.screen, "update_from", None)
        if update is not None and self.screen is not self.screen_stack[0]:
            update(snap)

    def _render_status(self) -> None:
        rec = self.feed.recording
        for started, what in rec.outcomes():
            if started:
                self.notify(f"recording to {what} (r stops)", markup=False)
            else:
                self.notify(what, severity="error", markup=False)
        recording = f"{rec.path} {rec.frames} frames" if rec.active else None
        error = self.feed.error or self.render_error or rec.error
        self.status_bar.update_from(
            self.shown, self.paused, error, self.feed.position(), recording, self.feed.notice
        )

    def _render_shown(self) -> None:
        snap = self.shown
        self._render_status()
        if snap is None:
            return
        with self.batch_update():
            table = self.table
            table.update_from(snap)
            key = table.selected_key()
            if key is not None:
                self.selected = key
            elif self.selected is None and snap.sources:
                self.selected = snap.sources[0].key
            self._render_detail(snap)
            self.fleet_headline.update_from(fleet_summary(snap) if len(snap.sources) > 1 else None)
            self._render_screen(snap)

    def _render_detail(self, snap: Snapshot) -> None:
        src: SourceSnapshot | None = snap.source(self.selected)
        if src is None and snap.sources:
            src = snap.sources[0]
        self.spec.update_from(src)
        self.acceptance.update_from(src)
        self.positions.update_from(src)
        self.histogram.update_from(src)
        self.proposals.update_from(src)
        self.health.update_from(src, snap)
        self.findings.update_from(src)
        if self.manifest is not None:
            self.layer_map.update_from(src)
            self.probe.update_from(src)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a source: its requests."""
        key = event.row_key.value if event.row_key is not None else None
        if event.data_table is self.table and key and self.shown is not None and self.shown.source(key):
            self.push_screen(RequestsScreen(key))
            self._tick()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if key and key != self.selected and self.shown is not None and self.shown.source(key):
            self.selected = key
            self._render_detail(self.shown)

    # -- actions ---------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self.shown = self.latest
        self._render_shown()

    def action_toggle_record(self) -> None:
        """Record what the monitor receives into an MCAP file, as ``eagle3-top record`` would."""
        rec = self.feed.recording
        if rec.active:
            path = rec.path
            rec.stop()
            self.notify(f"recording stopped: {path} ({rec.frames} frames)", markup=False)
        else:
            why = rec.start(default_name(self.record_dir))
            if why is not None:
                self.notify(why, severity="error", markup=False)
            # else the worker opens the file: _render_status says so once it has, or why not
        self._render_status()

    def action_next_window(self) -> None:
        """Acceptance since start, over the last 60 s, over the last 10 s, and round again."""
        i = WINDOWS.index(self.window_s) if self.window_s in WINDOWS else 0
        self.window_s = WINDOWS[(i + 1) % len(WINDOWS)]
        self.notify(f"acceptance {window_label(self.window_s)}", timeout=1.5)
        self._tick()

    async def action_plots(self) -> None:
        """The plots screen, drawn at once from the snapshot shown, then at every refresh."""
        if not any(isinstance(s, PlotsScreen) for s in self.screen_stack):
            await self.push_screen(PlotsScreen(self.title, self.manifest))
            self._render_shown()

    def action_toggle_theme(self) -> None:
        self.theme = THEMES["light"] if self.theme == THEMES["dark"] else THEMES["dark"]

    def action_findings(self) -> None:
        if not isinstance(self.screen, FindingsScreen):
            self.push_screen(FindingsScreen(self.selected))
            self._tick()

    async def action_fleet(self) -> None:
        """Every source merged, worst first; enter there selects a source for the detail."""
        if not isinstance(self.screen, FleetScreen):
            await self.push_screen(FleetScreen(), self._select)
            self._render_shown()

    def action_pick_source(self) -> None:
        """Filter the sources by typing, pick one with the arrows and enter."""
        if self.shown is not None and not isinstance(self.screen, SourcePicker):
            self.push_screen(SourcePicker(self.shown.sources, self.selected), self._select)

    def _select(self, key: str | None) -> None:
        """Show this source in the detail panels, with the table's cursor on its row."""
        if key is None or key not in self.table.rows:
            return
        self.selected = key
        self.table.move_cursor(row=self.table.get_row_index(key))
        if self.shown is not None:
            self._render_detail(self.shown)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(replay=self.REPLAY))

    def _move(self, delta: int) -> None:
        table = self.table
        if table.row_count:
            table.move_cursor(row=(table.cursor_row + delta) % table.row_count)

    def action_next_source(self) -> None:
        self._move(1)

    def action_prev_source(self) -> None:
        self._move(-1)
