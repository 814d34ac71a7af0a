"""The config file: where it is found, what it sets, precedence against flags, and one line for
each thing wrong with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from eagle3_top.tracer.analysis.thresholds import Thresholds
from eagle3_top.tui.config import ConfigError, find_config, load_config
from patience import HANG_GUARD_S

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def write(tmp_path: Path, text: str, name: str = "config.toml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_a_full_file_sets_every_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
endpoints = ["tcp://10.0.0.5:5557", "10.0.0.6:5557"]
manifest = "~/m.json"
interval = 0.5
baseline_tok_s = 90.0
theme = "light"
[thresholds]
accept_gap = 0.1
min_request_steps = 50
stale_after_s = 10
[requests]
internal_rid_prefixes = ["HEALTH_CHECK", "warmup-"]
""",
    )
    cfg = load_config(path)
    assert cfg.endpoints == ("tcp://10.0.0.5:5557", "10.0.0.6:5557")
    assert cfg.manifest is not None and cfg.manifest.endswith("/m.json") and "~" not in cfg.manifest
    assert (cfg.interval, cfg.baseline_tok_s, cfg.theme) == (0.5, 90.0, "light")
    assert cfg.thresholds == Thresholds(accept_gap=0.1, min_request_steps=50, stale_after_s=10)
    assert cfg.internal_rid_prefixes == ("HEALTH_CHECK", "warmup-")


def test_where_it_is_looked_for(tmp_path: Path) -> None:
    home = tmp_path / "xdg"
    (home / "eagle3-top").mkdir(parents=True)
    default = write(home / "eagle3-top", "theme = 'light'\n")
    env = {"XDG_CONFIG_HOME": str(home)}
    assert find_config(None, env) == (default, False)
    assert find_config(None, {**env, "EAGLE3_TOP_CONFIG": "/x.toml"}) == ("/x.toml", True)
    assert find_config("/y.toml", {**env, "EAGLE3_TOP_CONFIG": "/x.toml"}) == ("/y.toml", True)
    assert find_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}) == (None, False)
    assert load_config(None, env).theme == "light"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("theme = 'solarized'", "theme 'solarized': expected one of dark, light"),
        ("intervall = 1", "unknown key(s) intervall"),
        ("[thresholds]\naccept_gapp = 0.1", "unknown threshold(s) accept_gapp"),
        ("[thresholds]\naccept_gap = -1", "threshold accept_gap = -1: expected a positive number"),
        ("[thresholds]\nmin_request_steps = 2.5", "min_request_steps = 2.5: expected a whole number"),
        ("interval = 'fast'", "interval = 'fast': expected a number"),
        ("endpoints = [1, 2]", "endpoints: expected a list of strings"),
        ("theme = ", "not TOML"),
    ],
)
def test_each_mistake_is_one_line_naming_the_file(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(path) and says in str(err.value) and "\n" not in str(err.value)


def test_a_named_file_must_exist_the_default_need_not(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(str(tmp_path / "missing.toml"))
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)}).path is None


def test_the_command_line_beats_the_file_and_a_bad_file_exits_2(tmp_path: Path) -> None:
    from eagle3_top.tui.commands import live

    ns = live.build_parser().parse_args(
        ["--interval", "2", "--config", write(tmp_path, "interval = 0.5\nendpoints = ['h:1']")]
    )
    assert live._apply_config(ns) is None
    assert ns.interval == 2.0 and ns.endpoints == ["h:1"] and ns.record_dir == "."
    bad = write(tmp_path, "theme = 'x'", "bad.toml")
    for args in (["--once", "--config", bad], ["check", "h:1", "--config", bad]):
        r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "bad.toml" in r.stderr and "theme 'x'" in r.stderr


def test_thresholds_from_the_file_move_the_gate(tmp_path: Path) -> None:
    """312 request-steps at accept length 1 are judged at the default 200; a file asking for 1,000
    keeps the finding back until there is that much evidence."""
    from eagle3_top.tracer.analysis.diagnose import diagnose
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.schema import HELLO, STEP, decode, encode
    from stream_samples import hello, step

    book = EvidenceBook()
    frames = [encode(HELLO, "b:1:r0", 0, 1.0, hello().to_body())]
    frames += [encode(STEP, "b:1:r0", i, 1.0, step(i, batch=8, max_accept=1)) for i in range(1, 40)]
    book.ingest([decode(f) for f in frames], 1.0)
    ev = book.sources["b:1:r0"]
    assert "ACCEPT_LENGTH_LOW" in {f.code for f in diagnose(ev)}
    th = load_config(write(tmp_path, "[thresholds]\nmin_request_steps = 1000\n")).thresholds
    assert "ACCEPT_LENGTH_LOW" not in {f.code for f in diagnose(ev, None, th)}


def test_acc_mark_gap_from_the_file_decides_the_red_mark() -> None:
    """A served conditional rate 0.24 below training's acc_i is red at the default gap (0.2), not at 0.5."""
    from dataclasses import replace

    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.schema import HELLO, STEP, DraftClaims, decode, encode
    from eagle3_top.tui.position_bars import render_positions
    from eagle3_top.tui.snapshot import take_snapshot
    from stream_samples import hello, step

    book = EvidenceBook()
    h = hello(DraftClaims(acc=[0.99, 0.99, 0.99]))
    frames = [encode(HELLO, "b:1:r0", 0, 1.0, h.to_body())]
    frames += [encode(STEP, "b:1:r0", i, 1.0, step(i, batch=8, max_accept=4)) for i in range(1, 40)]
    book.ingest([decode(f) for f in frames], 1.0)
    src = take_snapshot(book, {}, 2.0).sources[0]
    assert src.summary.conditional[0] < 0.99 - 0.2  # uniform acceptance: 0.75 at position 1

    def red_marks(s) -> int:
        text = render_positions(s, 60, 6)
        return sum(1 for span in text.spans if str(span.style) == "red")

    assert red_marks(src) >= 1
    assert red_marks(replace(src, acc_mark_gap=0.5)) == 0
