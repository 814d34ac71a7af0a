"""A plain (non-editable) install carries every module, the bundled weights, the CSS and both
entry points, under the eagle3_top namespace only."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wheel_contents(tmp_path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            ROOT,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("eagle3_top-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"eagle3_top"}, top  # no bare tracer/ tui/ hooks/ packages in site-packages
    for required in (
        "eagle3_top/tracer/serving/publisher.py",
        "eagle3_top/tracer/reader/recording/reader.py",
        "eagle3_top/tui/app.tcss",
        "eagle3_top/hooks/sglang/plugin.py",
        "eagle3_top/hooks/sglang/observe/__main__.py",  # preflight runs it by its module name
        "eagle3_top/tracer/engines/sglang/observed.json",  # the defect table preflight and check read
        "eagle3_top/tracer/engines/toy/__init__.py",
        "eagle3_top/tracer/engines/vllm/capture.py",
        "eagle3_top/hooks/vllm/plugin.py",
        "eagle3_top/hooks/adapter.py",
        "eagle3_top/tracer/export/feed.py",
        "eagle3_top/hooks/toy/weights/target/model.pt",
        "eagle3_top/hooks/toy/weights/target/tokenizer.json",
        "eagle3_top/hooks/toy/weights/draft/config.json",
        "eagle3_top/hooks/toy/weights/draft-ids-not-read/config.json",
    ):
        assert required in names, required
    meta = next(n for n in names if n.endswith("entry_points.txt"))
    entry_points = zipfile.ZipFile(wheel).read(meta).decode()
    assert "eagle3-top = eagle3_top.tui.cli:entry" in entry_points
    assert (
        "[sglang.srt.plugins]" in entry_points and "eagle3_top.hooks.sglang.plugin:register" in entry_points
    )
    assert (
        "[vllm.general_plugins]" in entry_points and "eagle3_top.hooks.vllm.plugin:register" in entry_points
    )
