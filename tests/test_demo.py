"""`eagle3-top demo` without its monitor: start-up, supervision and clean-up, on real processes.

The monitor itself is replaced by a function (``show``) where that is enough; the signal tests run the
command in a process of its own and signal it before the monitor would open. tests/test_e2e_tmux.py
covers the path through the monitor.
"""

from __future__ import annotations

import importlib.util
import io
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tui.commands import demo
from patience import HANG_GUARD_S


def _terminal() -> tuple[int, int]:
    """A pseudo-terminal for the demo's stdin and stdout: it refuses to run without one."""
    return pty.openpty()


def _drain(fd: int) -> str:
    out = b""
    os.set_blocking(fd, False)
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except OSError:  # EAGAIN: nothing more; EIO: the other side is closed
        pass
    os.close(fd)
    return out.decode(errors="replace")


pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the engines need torch")

# generous: a shared 2-core box under load takes several seconds to import torch in each engine
WAIT_S = 90.0


def _procs() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, process group, state), from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields after its last ')' do not
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid, (_, _, state) in _procs().items() if pid in pids and state != "Z"}


def _in_groups(groups: set[int]) -> set[int]:
    return {pid for pid, (_, pgrp, state) in _procs().items() if pgrp in groups and state != "Z"}


def _descendants(root: int) -> set[int]:
    procs = _procs()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in procs.items() if ppid in frontier} - found
        found |= frontier
    return found


def _kill(pids: set[int]) -> None:
    # only for a failing test: what the demo should have stopped must not outlive the test
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _bundled_paths() -> dict[str, str]:
    from eagle3_top.hooks.toy import paths

    return {
        "target": paths.target_dir(),
        "draft": paths.draft_dir(),
        "draft_ids_not_read": paths.draft_ids_not_read_dir(),
    }


class Recorder:
    """A ``show`` that notes what it was given, checks the engines run, then does ``then``."""

    def __init__(self, then: Callable[[demo.Demo], None] | None = None) -> None:
        self.calls: list[tuple[list[str], Manifest | None]] = []
        self.then = then

    def __call__(self, d: demo.Demo, endpoints: list[str], manifest: Manifest | None) -> None:
        self.calls.append((endpoints, manifest))
        engines = {c.proc.pid for c in d.engines()}
        assert len(engines) == 2 and _alive(engines) == engines
        if self.then is not None:
            self.then(d)


def _pids(d: demo.Demo) -> set[int]:
    return {c.proc.pid for c in d.children}


def test_a_crafted_tmpdir_runs_nothing_and_the_demo_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what a shell would run, were the temporary paths ever handed to one (relative: a file name
    # cannot hold a slash, so the commands would write in the working directory)
    crafted = tmp_path / "t $(touch pwned1);touch pwned2;`touch pwned3`|touch pwned4&'\""
    crafted.mkdir()
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    show = Recorder()

    d = demo.Demo(tmp_root=str(crafted), rate=20.0, err=err)
    code = demo.run(d, show)

    text = err.getvalue()
    assert code == 0, text
    assert not list(tmp_path.rglob("pwned*")), "a command in the temporary path ran"
    [(endpoints, manifest)] = show.calls
    assert len(endpoints) == 2 and manifest is not None, text
    assert manifest.layer_ids == [-1, 2, 5]
    # the progress, before the monitor would open, in the order things happen
    steps = [
        "building the training manifest",
        "training manifest built",
        "starting engine healthy on tcp://127.0.0.1:",
        "starting engine ids-not-read on tcp://127.0.0.1:",
        "waiting for first steps",
    ]
    positions = [text.find(s) for s in steps]
    assert -1 not in positions and positions == sorted(positions), text
    assert len(_pids(d)) == 5 and not _alive(_pids(d))
    assert list(crafted.iterdir()) == [], "the temporary directory was left behind"


# the manifest build, then the engines importing torch: the two stretches of a start-up
BUILDING, ENGINES = "building the training manifest", "starting engine ids-not-read"


@pytest.mark.parametrize(
    ("signum", "during"),
    [
        (signal.SIGTERM, BUILDING),
        (signal.SIGTERM, ENGINES),
        (signal.SIGINT, BUILDING),
        (signal.SIGHUP, ENGINES),
    ],
    ids=["SIGTERM-building", "SIGTERM-engines", "SIGINT-building", "SIGHUP-engines"],
)
def test_a_signal_during_start_up_stops_every_child_group_and_removes_the_temp_dir(
    tmp_path: Path, signum: int, during: str
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    master, slave = _terminal()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eagle3_top.tui.cli", "demo"],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    os.close(slave)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    groups: set[int] = set()
    try:
        deadline = time.monotonic() + WAIT_S
        while not any(during in line for line in lines):
            assert proc.poll() is None, "".join(lines)[-2000:]
            assert time.monotonic() < deadline, f"no start-up progress: {''.join(lines)[-2000:]!r}"
            time.sleep(0.05)
        # The line comes just before the child it announces (the training data, or the second
        # engine), and a child leads its own group only once it has called setsid: wait for both.
        want = 1 if during == BUILDING else 2
        while len(groups) < want:
            assert time.monotonic() < deadline, "no child of the demo leads a group of its own"
            groups = {pid for pid, (ppid, pgrp, _) in _procs().items() if ppid == proc.pid and pgrp == pid}
            time.sleep(0.02)

        proc.send_signal(signum)
        assert proc.wait(timeout=HANG_GUARD_S) == 128 + signum
        reader.join(timeout=5)
        assert not _in_groups(groups), "a child of the demo outlived it"
        assert list(tmp.iterdir()) == [], "the temporary directory was left behind"
    finally:
        strays = _descendants(proc.pid) | _in_groups(groups)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill(strays)
        os.close(master)


def test_an_engine_that_fails_to_start_is_reported_before_any_monitor_and_the_logs_are_kept(
    tmp_path: Path,
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    master, slave = _terminal()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle3_top.tui.cli",
            "demo",
            "--no-manifest",
            f"--engine-arg=--model-path={tmp_path / 'no-such-model'}",
        ],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
        timeout=WAIT_S * 2,
    )
    os.close(slave)
    screen = _drain(master)
    assert out.returncode == 1, out.stderr
    assert "\x1b[?1049h" not in screen + out.stderr, "the monitor opened (its alternate screen)"
    assert re.search(r"engine (healthy|ids-not-read) exited with status 2 during start-up", out.stderr)
    assert "no-such-model/config.json" in out.stderr, "the tail of the engine's log is missing"
    kept = re.search(r"logs kept: (.*)", out.stderr)
    assert kept, out.stderr
    logs = kept.group(1).split()
    assert logs and all(Path(p).is_file() and p.endswith(".log") and p.startswith(str(tmp)) for p in logs)
    [work_dir] = tmp.iterdir()
    assert all(p.suffix == ".log" for p in work_dir.iterdir())


def test_an_engine_that_dies_while_the_monitor_is_open_is_printed_after_it_closes(tmp_path: Path) -> None:
    err = io.StringIO()

    def oom_kill_healthy(d: demo.Demo) -> None:
        # the kernel's OOM killer, say: the engine goes without a word of its own
        healthy = next(c for c in d.engines() if c.name == "healthy")
        healthy.proc.send_signal(signal.SIGKILL)
        healthy.proc.wait(timeout=HANG_GUARD_S)
        assert "SIGKILL" not in err.getvalue(), "printed while the monitor was open"
        err.write("<monitor closed>\n")

    show = Recorder(then=oom_kill_healthy)
    d = demo.Demo(build_manifest=False, tmp_root=str(tmp_path), err=err)
    code = demo.run(d, show)

    text = err.getvalue()
    assert code == 1, text
    after = text.split("<monitor closed>\n", 1)[1]
    assert "engine healthy was killed by SIGKILL" in after
    assert "publishing on tcp://127.0.0.1:" in after, "the tail of its log"
    assert "ids-not-read" not in after.split("logs kept")[0], "the engine stopped by the demo is no failure"
    assert not _alive(_pids(d))
    assert "logs kept: " in after
    [work_dir] = tmp_path.iterdir()
    assert {"healthy.log", "ids-not-read.log"} <= {p.name for p in work_dir.iterdir()}
    assert all(p.suffix == ".log" for p in work_dir.iterdir())


def test_an_exception_in_the_monitor_stops_the_engines_and_propagates(tmp_path: Path) -> None:
    def boom(d: demo.Demo) -> None:
        raise RuntimeError("boom")

    show = Recorder(then=boom)
    d = demo.Demo(build_manifest=False, tmp_root=str(tmp_path), err=io.StringIO())
    with pytest.raises(RuntimeError, match="boom"):
        demo.run(d, show)
    assert len(d.engines()) == 2 and not _alive(_pids(d))
    [work_dir] = tmp_path.iterdir()
    assert all(p.suffix == ".log" for p in work_dir.iterdir())


def test_a_failed_manifest_build_says_so_in_one_line_and_exits_non_zero(tmp_path: Path) -> None:
    err = io.StringIO()
    show = Recorder()
    paths = {**_bundled_paths(), "target": str(tmp_path / "no-target")}
    d = demo.Demo(paths=paths, tmp_root=str(tmp_path), err=err)
    code = demo.run(d, show)

    text = err.getvalue()
    assert code == 1, text
    assert show.calls == [], "the demo went on without a layer map"
    headline = [line for line in text.splitlines() if "no training manifest" in line]
    assert headline == [
        "eagle3-top demo: no training manifest: eagle3-top manifest build exited with status 2"
    ], text
    assert "target config.json not found" in text, "the tail of the build's log"
    # the training data and the build, and no engine started for a demo that cannot run
    assert len(d.children) == 2 and not _alive(_pids(d))


def test_a_start_up_step_that_outlasts_the_timeout_fails_loudly(tmp_path: Path) -> None:
    err = io.StringIO()
    show = Recorder()
    d = demo.Demo(paths=_bundled_paths(), start_timeout_s=0.5, tmp_root=str(tmp_path), err=err)
    code = demo.run(d, show)
    text = err.getvalue()
    assert code == 1, text
    assert show.calls == []
    assert "no training manifest: generating training data took longer than 0.5 s (--start-timeout)" in text


def test_without_a_terminal_the_demo_refuses_before_starting_anything(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "demo"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_GUARD_S,
        env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == "eagle3-top demo: the monitor needs a terminal (stdin and stdout)"
    assert out.stdout == "" and list(tmp.iterdir()) == []
