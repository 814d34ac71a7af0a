"""Every command's output may be cut short by its reader (``eagle3-top ... --json | head``): no
traceback on stderr, whichever command it is, and the status a process killed by SIGPIPE reports
(or the command's own, where it says it was cut short itself)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
DEMO = str(ROOT / "examples" / "demo.mcap")


def closed_reader(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a command whose stdout's reader has gone before it writes a byte."""
    p = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone: the first write fails with EPIPE
    err = p.stderr.read()
    return subprocess.CompletedProcess(args, p.wait(), "", err)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pipes")
    for name, src in (
        ("target", "qwen3-Qwen3-8B-target.json"),
        ("draft", "qwen3-Qwen3-8B-specforge-draft.json"),
    ):
        (out / name).mkdir()
        shutil.copyfile(ROOT / "tests" / "data" / "published" / src, out / name / "config.json")
    return out


@pytest.mark.parametrize(
    "args",
    [
        ["recording", "info", DEMO, "--json"],
        ["recording", "info", DEMO],
        ["dump", DEMO, "--json"],
        ["--replay", DEMO, "--once", "--json"],
        ["check", "--replay", DEMO, "--json", "--allow-partial"],
        ["manifest", "show", str(ROOT / "examples" / "demo-manifest.json")],
        ["--help"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_reader_that_goes_away_gets_no_traceback(args: list[str]) -> None:
    r = closed_reader(args)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    assert r.returncode in (0, 1, 3, 141), (r.returncode, r.stderr)


def test_preflight_json_into_a_closed_pipe(pair: Path) -> None:
    args = ["preflight", "--model-path", str(pair / "target"), "--speculative-draft-model-path", str(pair / "draft"),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--from-table", "--json"]  # fmt: skip
    whole = subprocess.run([*CLI, *args], capture_output=True, text=True)
    assert whole.returncode in (0, 1) and json.loads(whole.stdout)["engine"] == "sglang"
    r = closed_reader(args)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 141
