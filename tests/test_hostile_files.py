"""Every file a command reads from outside is a regular file of bounded size, or one line saying why
not: a FIFO (which would block an ``open`` forever), a device (``/dev/zero``, read until memory runs
out), a symbolic link loop, given as a recording, a manifest, a key, a config, an endpoints file, a
training file, a model directory's config.json, a tokenizer, or a recording to write. Each command
runs as a user runs it; the wait is a guard against the hang itself, not a verdict."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
HANG_GUARD_S = 120
DEAD = "tcp://127.0.0.1:1"  # nothing listens there: commands that read a file first say so first


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("hostile-files")
    fifo = d / "fifo"
    os.mkfifo(fifo)
    (d / "loop-a").symlink_to(d / "loop-b")
    (d / "loop-b").symlink_to(d / "loop-a")
    # model directories whose config.json is a FIFO; a training-data directory holding one
    for name in ("target", "draft", "data"):
        (d / name).mkdir()
    os.mkfifo(d / "target" / "config.json")
    os.mkfifo(d / "draft" / "config.json")
    os.mkfifo(d / "data" / "data_0.ckpt")
    good_target = d / "good-target"
    good_target.mkdir()
    shutil.copyfile(
        ROOT / "tests" / "data" / "published" / "qwen3-Qwen3-8B-target.json", good_target / "config.json"
    )
    good_draft = d / "good-draft"
    good_draft.mkdir()
    shutil.copyfile(
        ROOT / "tests" / "data" / "published" / "qwen3-Qwen3-8B-specforge-draft.json",
        good_draft / "config.json",
    )
    return {k: str(v) for k, v in {"fifo": fifo, "loop": d / "loop-a", "dir": d, "target": d / "target",
            "draft": d / "draft", "data": d / "data", "good_target": good_target, "good_draft": good_draft, "out": d / "out.mcap"}.items()}  # fmt: skip


CASES = {
    "recording info": lambda b: ["recording", "info", b["fifo"]],
    "dump": lambda b: ["dump", b["fifo"]],
    "check --replay": lambda b: ["check", "--replay", b["fifo"]],
    "monitor --replay": lambda b: ["--replay", b["fifo"], "--once"],
    "check --manifest": lambda b: ["check", DEAD, "--manifest", b["fifo"]],
    "manifest show": lambda b: ["manifest", "show", b["fifo"]],
    "monitor --manifest": lambda b: [DEAD, "--manifest", b["fifo"], "--once"],
    "monitor --endpoints-file": lambda b: ["--endpoints-file", b["fifo"], "--once"],
    "check --endpoints-file": lambda b: ["check", "--endpoints-file", b["fifo"]],
    "record --endpoints-file": lambda b: ["record", "--endpoints-file", b["fifo"], "-o", b["out"]],
    "check --config": lambda b: ["check", DEAD, "--config", b["fifo"]],
    "check --curve keys": lambda b: [
        "check",
        DEAD,
        "--curve-server-key",
        b["fifo"],
        "--curve-client-secret",
        "/dev/zero",
    ],
    "record --curve keys": lambda b: [
        "record",
        DEAD,
        "-o",
        b["out"],
        "--curve-server-key",
        "/dev/zero",
        "--curve-client-secret",
        b["fifo"],
    ],  # fmt: skip
    "export --manifest": lambda b: ["export", "--prometheus", "0", DEAD, "--manifest", b["fifo"]],
    "preflight config.json": lambda b: [
        "preflight",
        "--model-path",
        b["target"],
        "--speculative-draft-model-path",
        b["draft"],
        "--from-table",
    ],  # fmt: skip
    "preflight draft config.json": lambda b: [
        "preflight",
        "--model-path",
        b["good_target"],
        "--speculative-draft-model-path",
        b["draft"],
        "--from-table",
    ],  # fmt: skip
    "manifest build": lambda b: [
        "manifest",
        "build",
        "--draft",
        b["draft"],
        "--data",
        b["data"],
        "--target-config",
        b["good_target"],
        "--out",
        os.path.join(b["dir"], "m.json"),
    ],  # fmt: skip
    "manifest build --data": lambda b: [
        "manifest",
        "build",
        "--draft",
        b["good_draft"],
        "--data",
        b["data"],
        "--target-config",
        b["good_target"],
        "--out",
        os.path.join(b["dir"], "m2.json"),
    ],  # fmt: skip
    "monitor --tokenizer": lambda b: [
        "--replay",
        str(ROOT / "examples" / "demo.mcap"),
        "--once",
        "--tokenizer",
        b["fifo"],
    ],
    "record -o FIFO": lambda b: ["record", DEAD, "-o", b["fifo"], "--force", "--duration", "600"],
    "relay --record FIFO": lambda b: [
        "relay",
        "--bind",
        "tcp://127.0.0.1:0",
        "--connect",
        DEAD,
        "--record",
        b["fifo"],
        "--force",
    ],  # fmt: skip
    "recording info loop": lambda b: ["recording", "info", b["loop"]],
    "monitor --tokenizer loop": lambda b: [
        "--replay",
        str(ROOT / "examples" / "demo.mcap"),
        "--once",
        "--tokenizer",
        b["loop"],
    ],  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_that_is_no_regular_file_gets_one_line(bad: dict[str, str], case: str) -> None:
    args = CASES[case](bad)
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert any(w in lines[0] for w in ("FIFO", "character device", "loop of symbolic links")), lines[0]
    assert "nobody reads" in lines[0] if case.endswith("FIFO") else True
