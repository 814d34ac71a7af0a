"""The fleet merge (tui/fleet.py) over hand-built snapshots whose merged figures are worked out by
hand below: counts are added, never per-source ratios averaged."""

from __future__ import annotations

import time

import numpy as np
import pytest
from eagle3_top.tracer.analysis.acceptance import AcceptanceStats
from eagle3_top.tracer.analysis.findings import ERROR, WARNING, Finding
from eagle3_top.tracer.reader.ledger import Loss
from eagle3_top.tracer.schema import Health
from eagle3_top.tui.fleet import CLOSED, GONE, REPLACED, RESTARTED, STALE, fleet_summary
from eagle3_top.tui.snapshot import Snapshot, SourceSnapshot

NOW = 1_780_000_101.5  # the steps below run in second ...100; rates count whole seconds before now


def source(
    key: str,
    steps: list[list[int]],
    n: int,
    *,
    findings: tuple[Finding, ...] = (),
    expected: float | None = None,
    health: Health | None = None,
    age: float = 0.1,
    stale: bool = False,
    dead: bool = False,
    loss: Loss | None = None,
) -> SourceSnapshot:
    stats = AcceptanceStats()
    for acc in steps:
        stats.add(np.asarray(acc, dtype=np.int32), n, NOW - 1.0)
    host, pid, rank = key.split(":")
    return SourceSnapshot(
        key=key, host=host, pid=pid, rank=rank, engine="sglang", name=f"{key} sglang", hello=None,
        health=health, aux=None, summary=stats.summary(NOW), last_batch=0, last_n=n,
        last_topk=1, stale=stale, age_s=age, received=1, missed=0, steps=len(steps), step_errors=0,
        hellos=1, auxes=0, probes=0, findings=findings, expected_accept_length=expected, dead=dead,
        loss=loss or Loss(),
    )  # fmt: skip


def finding(code: str, severity: str = ERROR) -> Finding:
    return Finding(code, severity, f"{code} message", "fix it")


def snapshot(*sources: SourceSnapshot, endpoints: tuple[tuple[str, str], ...] = ()) -> Snapshot:
    return Snapshot(now=NOW, sources=sources, endpoints=endpoints)


def test_merge_weights_by_request_steps_not_by_source() -> None:
    # a: 1 step, 2 requests each accepting all 3 drafts: accept length 4, 2 request-steps
    a = source("h:1:r0", [[3, 3]], n=4)
    # b: 2 steps of 4 requests, one accepted draft in all: 8 request-steps, 9 tokens, length 1.125
    b = source("h:2:r0", [[0, 0, 0, 0], [1, 0, 0, 0]], n=4)
    # c: a chain of one draft (n=2), 1 step of 2 requests accepting it: length 2
    c = source("h:3:r0", [[1, 1]], n=2)
    f = fleet_summary(snapshot(a, b, c))
    assert f.sources == 3 and f.request_steps == 12 and f.verify_steps == 4
    # tokens 8 + 9 + 4 = 21 over 12 request-steps (the mean of the three lengths would be 2.375)
    assert f.accept_length == pytest.approx(21 / 12)
    # accepted drafts 6 + 1 + 2 = 9 of proposed 2*3 + 8*3 + 2*1 = 32
    assert f.accept_rate == pytest.approx(9 / 32)
    # position 1: accepted by a's 2, b's 1, c's 2 of 12 proposing it; positions 2, 3: a's 2 of 10
    assert f.unconditional.tolist() == pytest.approx([5 / 12, 2 / 10, 2 / 10])
    # conditional: P(1) = 5/12, P(2 | 1) = 2/5, P(3 | 2) = 2/2
    assert f.conditional.tolist() == pytest.approx([5 / 12, 2 / 5, 1.0])
    # steps/s and tok/s add up: the steps ran in the one whole second before now
    assert f.steps_per_s == pytest.approx(4.0) and f.tokens_per_s == pytest.approx(21.0)
    assert "accept len 1.75" in f.headline() and "fleet of 3" in f.headline()


def test_merge_of_nothing_is_empty_not_an_error() -> None:
    f = fleet_summary(snapshot(source("h:1:r0", [], n=4), source("h:2:r0", [], n=4)))
    assert f.request_steps == 0 and f.accept_length == 0.0 and len(f.conditional) == 0
    assert "accept len —" in f.headline()


def test_worst_first_severity_then_ratio_to_expected_then_length() -> None:
    rows = {
        "warn:1:r0": source("warn:1:r0", [[0, 0]], 4, findings=(finding("X", WARNING),), expected=3.0),
        "err:1:r0": source("err:1:r0", [[3, 3]], 4, findings=(finding("Y"), finding("X", WARNING))),
        # no findings: ratio 2/4 = 0.5 is worse than 1.5/2 = 0.75, though its length is higher
        "half:1:r0": source("half:1:r0", [[1, 1]], 4, expected=4.0),
        "most:1:r0": source("most:1:r0", [[0, 1]], 4, expected=2.0),
        # no expected figure: after those with one, by accept length
        "lowlen:1:r0": source("lowlen:1:r0", [[0, 0]], 4),
        "idle:1:r0": source("idle:1:r0", [], 4),
    }
    f = fleet_summary(snapshot(*rows.values()))
    order = [r.source.key for r in f.rows]
    assert order == ["err:1:r0", "warn:1:r0", "half:1:r0", "most:1:r0", "lowlen:1:r0", "idle:1:r0"]
    assert f.rows[0].worst == ERROR and f.rows[0].findings == 2
    assert f.rows[2].ratio == pytest.approx(0.5)


def test_findings_grouped_by_code_across_sources() -> None:
    lm = finding("LAYER_MAP_MISMATCH")
    srcs = [source(f"gpu{i}:{100 + i}:r0", [[1]], 4, findings=(lm,) if i in (1, 3) else ()) for i in range(4)]
    srcs[0] = source("gpu0:100:r0", [[1]], 4, findings=(finding("ACCEPTANCE_BELOW_TRAINING", WARNING),))
    f = fleet_summary(snapshot(*srcs))
    assert [g.code for g in f.groups] == ["LAYER_MAP_MISMATCH", "ACCEPTANCE_BELOW_TRAINING"]
    assert f.groups[0].describe() == "LAYER_MAP_MISMATCH on 2 of 4 sources: gpu1:101:r0, gpu3:103:r0"
    assert f.groups[1].severity == WARNING and f.groups[1].keys == ("gpu0:100:r0",)
    many = fleet_summary(snapshot(*(source(f"h:{i}:r0", [[1]], 4, findings=(lm,)) for i in range(9))))
    assert many.groups[0].describe().endswith("h:5:r0, +3 more") and "on 9 of 9" in many.groups[0].describe()


def test_restart_under_a_new_pid_on_the_same_endpoint_and_rank() -> None:
    ep = "tcp://127.0.0.1:5557"
    old = source(
        "gpu:100:r0", [[1]], 4, age=12.0, stale=True, health=Health(started=NOW - 60, endpoint=ep, final=True)
    )
    new = source("gpu:200:r0", [[1]], 4, health=Health(started=NOW - 10, endpoint=ep))
    # the same endpoint on another rank is another engine, not a restart
    other = source("gpu:300:r1", [[1]], 4, health=Health(started=NOW - 5, endpoint=ep))
    f = fleet_summary(snapshot(old, new, other))
    by_key = {r.source.key: r for r in f.rows}
    assert by_key["gpu:100:r0"].state is not None and by_key["gpu:100:r0"].state.what == REPLACED
    assert by_key["gpu:200:r0"].restart is not None and by_key["gpu:200:r0"].restart.at == NOW - 10
    assert by_key["gpu:300:r1"].state is None and by_key["gpu:300:r1"].restart is None
    text = [e.describe(NOW) for e in f.events]
    clock = time.strftime("%H:%M:%S", time.localtime(NOW - 10))
    assert f"gpu:100:r0 replaced by pid 200 at {clock} (10s ago)" in text
    assert f"gpu:200:r0 restarted at {clock} (10s ago) (was pid 100)" in text
    assert "1 not live" in f.headline()


def test_closed_gone_stale_and_same_id_restarts_with_when() -> None:
    srcs = (
        source("a:1:r0", [[1]], 4, age=4.0, stale=True, health=Health(final=True)),
        source("b:1:r0", [[1]], 4, age=40.0, stale=True, dead=True),
        source("c:1:r0", [[1]], 4, age=5.0, stale=True),
        source("d:1:r0", [[1]], 4, health=Health(started=NOW - 3), loss=Loss(restarts=2)),
        source("e:1:r0", [[1]], 4, age=6.0, stale=True, health=Health(endpoint="tcp://e:1")),
    )
    f = fleet_summary(
        snapshot(*srcs, endpoints=(("tcp://e:1", "down (retrying)"), ("tcp://x:2", "connected")))
    )
    states = {r.source.key: (r.state.what, r.state.at) if r.state else None for r in f.rows}
    assert states == {
        "a:1:r0": (CLOSED, NOW - 4.0),
        "b:1:r0": (GONE, NOW - 40.0),
        "c:1:r0": (STALE, NOW - 5.0),
        "d:1:r0": None,
        "e:1:r0": (GONE, NOW - 6.0),
    }
    restart = next(r.restart for r in f.rows if r.source.key == "d:1:r0")
    assert restart is not None and restart.what == RESTARTED and restart.at == NOW - 3
    text = [e.describe(NOW) for e in f.events]
    assert any(
        t.startswith("e:1:r0 gone (endpoint down), last heard at ") and t.endswith("(6s ago)") for t in text
    )
    assert any(t.startswith("c:1:r0 stale, last heard at ") and t.endswith("(5s ago)") for t in text)
    assert any(t.startswith("d:1:r0 restarted at ") and "(2x under the same id)" in t for t in text)
    # newest first
    assert [e.key for e in f.events][:2] == ["d:1:r0", "a:1:r0"]


async def test_fleet_rows_handed_over_before_the_table_is_mounted_are_shown() -> None:
    """A refresh can reach the fleet screen's table before its on_mount (seen under load): the rows
    must show, and a later refresh with nothing new must not leave the table empty."""
    from eagle3_top.tui.fleet_table import FleetTable
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    snap = snapshot(source("h:1:r0", [[3, 3]], n=4), source("h:2:r0", [[0, 1]], n=4))
    fleet = fleet_summary(snap)

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield Static("fleet")

    app = Host()
    async with app.run_test(size=(120, 10)) as pilot:
        table = FleetTable()
        table.update_from(fleet, snap)  # built and handed rows, not yet mounted
        await app.mount(table)
        await pilot.pause(0.1)
        table.update_from(fleet, snap)  # the next refresh: nothing changed
        await pilot.pause(0.1)
        assert table.row_count == 2 and {k.value for k in table.rows} == {"h:1:r0", "h:2:r0"}
