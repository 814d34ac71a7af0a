"""The plots screen (g): the real app, replaying a real recording of two sources, and the live app
fed over loopback. Assertions read what each plot holds and what the screen shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import screen_text, wait_until
from eagle3_top.tracer.analysis.manifest import Manifest, load_manifest
from eagle3_top.tracer.analysis.probe_run import probe_rid
from eagle3_top.tracer.reader.recording import RecordingWriter
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tracer.schema import HELLO, PROBE, STEP, DraftClaims, encode, probe_body
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tui.app import Eagle3TopApp
from eagle3_top.tui.plots_screen import PlotsScreen
from eagle3_top.tui.replay_app import ReplayApp
from stream_samples import T0_NS, hello, step

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# two drafts that claim different training figures, one serving well and one badly
GOOD, BAD = "box:7:r0", "box:8:r0"
CLAIMS = {GOOD: [0.9, 0.8, 0.7], BAD: [0.6, 0.5, 0.4]}
MAX_ACCEPT = {GOOD: 4, BAD: 1}  # BAD accepts no draft at all: every position falls to 0


def chain_expectation(acc: list[float], steps: int = 3) -> float:
    """Accept length a chain of ``steps`` drafts reaches with per-position rates ``acc``."""
    return 1.0 + float(np.sum(np.cumprod(acc[:steps])))


def write_two_sources(path: Path, manifest: Manifest | None = None, seconds: int = 12) -> None:
    """Both sources as ``eagle3-top record`` stores them: a hello a second, 10 steps a second each;
    with a manifest, GOOD also answers a probe whose served slots 0 and 1 are swapped."""
    w = RecordingWriter(str(path), flush_interval_s=0.0)
    seq = dict.fromkeys(CLAIMS, 0)

    def add(kind: str, src: str, t_ns: int, body: object) -> None:
        w.add(encode(kind, src, seq[src], t_ns / 1e9, body), "tcp://box:5557", t_ns)
        seq[src] += 1

    for s in range(seconds):
        for k in range(11):
            for j, src in enumerate(CLAIMS):
                t_ns = T0_NS + s * 10**9 + k * (10**9 // 11) + j * 1000
                if k == 0:
                    add(HELLO, src, t_ns, hello(DraftClaims(acc=CLAIMS[src], source="test")).to_body())
                else:
                    add(STEP, src, t_ns, step(s * 10 + k, max_accept=MAX_ACCEPT[src]))
        if manifest is not None and s == 2:
            p = manifest.probes[0]
            rows = p.rows.reshape(p.rows.shape[0], 3, -1)[:, [1, 0, 2]].reshape(p.rows.shape[0], -1)
            body = probe_body(
                rid=probe_rid(0), rows=rows, slots=3, slot_width=128, offset=0, input_ids=p.input_ids
            )
            add(PROBE, GOOD, T0_NS + s * 10**9 + 5 * 10**8, body)
        w.tick()
    w.close()


def plots(app: Eagle3TopApp) -> PlotsScreen:
    assert isinstance(app.screen, PlotsScreen), f"not the plots screen: {app.screen!r}"
    return app.screen


async def open_plots(pilot: Any, app: ReplayApp) -> PlotsScreen:
    await wait_until(pilot, lambda: app.shown is not None and len(app.shown.sources) == 2, what="sources")
    await wait_until(pilot, lambda: app.timeline.position().at_end, what="the end")
    await pilot.press("g")
    await wait_until(pilot, lambda: isinstance(app.screen, PlotsScreen), what="the plots screen")
    screen = plots(app)
    await wait_until(pilot, lambda: len(screen.accept_plot.data.series) == 2, what="two series")
    return screen


async def test_g_plots_each_source_against_its_own_training_expectation(tmp_path: Path) -> None:
    path = tmp_path / "two.mcap"
    write_two_sources(path)
    app = ReplayApp(Timeline(str(path), speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await open_plots(pilot, app)
        snap = app.shown
        assert snap is not None
        data = screen.accept_plot.data
        assert [s.name for s in data.series] == [src.name for src in snap.sources]
        assert len({s.style for s in data.series}) == 2
        for s, src in zip(data.series, snap.sources, strict=True):
            assert [v for v in s.values if v is not None] == [v for v in src.summary.history if v > 0]
        # the drafts claim different acc_i: one dashed line each, at the chain's expectation
        refs = {r.label.split(" ")[0]: r.value for r in data.references}
        assert refs == pytest.approx(
            {GOOD: chain_expectation(CLAIMS[GOOD]), BAD: chain_expectation(CLAIMS[BAD])}
        )
        text = screen_text(app)
        assert f"{GOOD} trn {chain_expectation(CLAIMS[GOOD]):.2f}" in text
        assert f"{BAD} test" in text and "now" in text and "-5s" in text

        # the bars: the selected source's conditional rates beside its draft's acc_i
        pos = screen.position_plot.data
        selected = snap.source(app.selected)
        assert selected is not None and selected.key == GOOD  # the first source, as on the main screen
        assert pos.source == selected.name
        assert pos.served == pytest.approx(tuple(selected.summary.conditional))
        assert pos.training == pytest.approx(tuple(CLAIMS[selected.key]))
        lines = text.splitlines()
        left = [line.split("▏")[0] for line in lines]  # the bars' panel, left of the heat map's
        srv = next(line for line in left if line.lstrip().startswith("srv"))
        trn = next(line for line in left if line.lstrip().startswith("trn"))
        assert srv.split()[1:] == [f"{v:.2f}" for v in selected.summary.conditional]
        assert trn.split()[1:] == [f"{v:.2f}" for v in CLAIMS[selected.key]]

        # tab selects the other source on the plots screen too: its drop shows against training
        await pilot.press("tab")
        await wait_until(pilot, lambda: screen.position_plot.data.source.startswith(BAD), what="tab")
        assert screen.position_plot.data.served == pytest.approx((0.0, 0.0, 0.0))
        assert screen.position_plot.data.training == pytest.approx(tuple(CLAIMS[BAD]))
        assert all(screen.position_plot.data.low(i) for i in range(3))

        # no manifest: the heat map says what would fill it
        assert "needs a training manifest" in text and "eagle3-top probe" in text

        # not a frozen picture: seeking back redraws it from the snapshot of that moment
        before = data.series[0].values
        await pilot.press("3")  # 30%
        await wait_until(pilot, lambda: screen.accept_plot.data.series[0].values != before, what="redraw")
        assert isinstance(app.screen, PlotsScreen)
        shown = sum(v is not None for v in screen.accept_plot.data.series[0].values)
        assert 0 < shown < sum(v is not None for v in before)

        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, PlotsScreen), what="back to main")
        assert "per position" in screen_text(app) and "uncond" in screen_text(app)
        await pilot.press("g")
        await wait_until(pilot, lambda: isinstance(app.screen, PlotsScreen), what="plots again")
        await pilot.press("g")
        await wait_until(pilot, lambda: not isinstance(app.screen, PlotsScreen), what="g closes too")


async def test_probe_matrix_as_heat_map_and_one_training_line(tmp_path: Path) -> None:
    manifest = load_manifest(str(EXAMPLES / "demo-manifest.json"))
    path = tmp_path / "probe.mcap"
    write_two_sources(path, manifest)
    app = ReplayApp(Timeline(str(path), speed=None), manifest=manifest, refresh_hz=20)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await open_plots(pilot, app)
        snap = app.shown
        assert snap is not None
        # one manifest, one expectation for both: a single line, named training
        assert [r.label for r in screen.accept_plot.data.references] == [
            f"training {chain_expectation(manifest.training_acc):.2f}"
        ]
        assert screen.accept_plot.data.references[0].value == pytest.approx(
            chain_expectation(manifest.training_acc)
        )
        assert screen.position_plot.data.training == pytest.approx(tuple(manifest.training_acc))

        assert app.selected == GOOD  # the source that answered the probe
        heat = screen.heatmap
        await wait_until(pilot, lambda: heat.data.cells, what="the probe matrix")
        good = snap.source(GOOD)
        assert good is not None and good.probe is not None
        probe = good.probe
        assert np.allclose(np.array(heat.data.cells), probe.matrix)
        cells = np.array(heat.data.cells)
        # served slots 0 and 1 swapped: the bright cells sit off the diagonal there
        assert cells[0, 1] > 0.99 and cells[1, 0] > 0.99 and cells[2, 2] > 0.99 and cells[0, 0] < 0.99
        text = screen_text(app)
        assert "MISMATCH" in text and "s0→t1 s1→t0 s2→t2" in text
        row0 = next(line for line in text.splitlines() if " s0 " in line and "0." in line)
        cells_text = row0.split("s0", 1)[1].split()[:3]
        assert cells_text == [f"{v:.2f}" for v in probe.matrix[0]]


@pytest.mark.parametrize("size", [(80, 24), (120, 30), (200, 50)])
async def test_every_plot_is_legible_at_each_size(tmp_path: Path, size: tuple[int, int]) -> None:
    manifest = load_manifest(str(EXAMPLES / "demo-manifest.json"))
    path = tmp_path / "probe.mcap"
    write_two_sources(path, manifest)
    app = ReplayApp(Timeline(str(path), speed=None), manifest=manifest, refresh_hz=20)
    async with app.run_test(size=size) as pilot:
        screen = await open_plots(pilot, app)
        await wait_until(pilot, lambda: screen.heatmap.data.cells, what="the probe matrix")
        await pilot.pause(0.2)
        text = screen_text(app)
        lines = text.splitlines()
        assert len(lines) == size[1] and max(len(line) for line in lines) <= size[0]
        legend = next(line for line in lines if "accept len" in line)
        assert GOOD in legend and BAD in legend and "training" in legend  # on one line
        assert "1.00┤" in text and "now" in text  # the y and x axes
        assert any(line.lstrip().startswith("srv") for line in lines)
        assert any(line.lstrip().startswith("trn") for line in lines)
        assert "MISMATCH" in text and any(" s2 " in line for line in lines)


async def test_g_in_the_live_monitor(publisher: Publisher) -> None:
    publisher.set_hello(hello(DraftClaims(acc=CLAIMS[GOOD], source="test")))
    app = Eagle3TopApp([publisher.bound_endpoint], refresh_hz=20)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("g")
        screen = plots(app)
        await wait_until(
            pilot,
            lambda: "no source yet" in screen_text(app) or "no steps yet" in screen_text(app),
            what="empty",
        )
        assert not any(s.latest for s in screen.accept_plot.data.series)
        for i in range(60):
            publisher.publish(STEP, step(i, max_accept=4))
            await pilot.pause(0.01)
        await wait_until(
            pilot,
            lambda: any(s.latest for s in screen.accept_plot.data.series),
            what="a line as steps arrive",
        )
        assert [r.value for r in screen.accept_plot.data.references] == pytest.approx(
            [chain_expectation(CLAIMS[GOOD])]
        )
        assert "accept length per second" in screen_text(app)
