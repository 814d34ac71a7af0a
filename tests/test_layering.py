"""The import direction (docs/architecture.md), checked at run time in fresh interpreters.

The same rules are lint contracts (``lint-imports``, pyproject.toml); these tests see what really gets
loaded, module-level and lazy imports alike, including what third-party packages pull in.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from patience import HANG_GUARD_S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECK = """
import sys, importlib, pkgutil
import eagle3_top.{pkg} as root
for m in pkgutil.walk_packages(root.__path__, "eagle3_top.{pkg}."):
    if m.name.split(".")[2] in {skip!r}:
        continue
    importlib.import_module(m.name)
bad = sorted(name for name in {banned!r} if name in sys.modules)
print(",".join(bad))
"""


@pytest.mark.parametrize(
    "pkg, banned, skip",
    [
        ("tracer", ["textual", "rich", "sglang", "torch"], []),
        ("tui", ["torch", "sglang", "eagle3_top.hooks"], []),
        ("hooks", ["textual", "eagle3_top.tui", "eagle3_top.tracer.analysis"], ["sglang"]),
    ],
)
def test_package_does_not_import(pkg: str, banned: list[str], skip: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK.format(pkg=pkg, banned=banned, skip=skip)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "", f"eagle3_top.{pkg} imports {out.stdout.strip()}"


# Everything the serving process loads once the tracer is on (the SGLang plugin after start-up, or
# the built-in engine with its tracer), and what it must never load.
IN_SERVER = [
    "eagle3_top.hooks.sglang.plugin",
    "eagle3_top.hooks.sglang.launch",
    "eagle3_top.hooks.sglang.wiring",
    "eagle3_top.hooks.sglang.verify",
    "eagle3_top.hooks.sglang.probe",
    "eagle3_top.hooks.toy_tracing",
    "eagle3_top.tracer.serving.tracer",
    "eagle3_top.tracer.transport.curve",
]
NEVER_IN_SERVER = re.compile(
    r"^(eagle3_top\.tracer\.analysis|eagle3_top\.tracer\.reader|eagle3_top\.tui|textual|rich"
    r"|urllib\.request|http\.client|concurrent\.futures|asyncio)(\.|$)"
)

CLOSURE = """
import sys
before = set(sys.modules)
import {modules}
print("\\n".join(sorted(set(sys.modules) - before)))
"""


def test_the_serving_process_loads_nothing_of_the_analysis() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CLOSURE.format(modules=", ".join(IN_SERVER))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "eagle3_top.tracer.serving.publisher" in out and "eagle3_top.tracer.schema" in out
    loaded = [m for m in out if NEVER_IN_SERVER.match(m)]
    assert not loaded, f"the in-server modules load {loaded}"


def _importtime(code: str) -> set[str]:
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    ).stderr
    return {line.rsplit("|", 1)[1].strip() for line in err.splitlines() if line.startswith("import time:")}


def test_plugin_import_adds_no_analysis_and_no_http_client() -> None:
    """What SGLang's plugin loader imports in every process it starts: the plugin module alone. The
    interpreter's own start-up (``site``) may load ``urllib.parse`` through pathlib; what matters is
    what importing the plugin adds."""
    baseline = _importtime("pass")
    added = _importtime("import eagle3_top.hooks.sglang.plugin") - baseline
    assert "eagle3_top.hooks.sglang.plugin" in added
    for name in added:
        assert not re.search(
            r"manifest|diagnose|probe|trainfiles|evidence|urllib|concurrent|numpy|zmq", name
        ), name


# The gate commands run where only the wire libraries are: inside a serving container, from a
# checkout on PYTHONPATH (how the GPU scripts run them next to SGLang). Seen on SGLang's GPU image:
# a live `check` died importing mcap, which only --replay needs.
HEADLESS = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"textual", "rich", "mcap", "zstandard", "lz4", "prometheus_client",
                                   "textual_serve", "textual_plotext", "torch", "sglang"}:
            raise ModuleNotFoundError(f"No module named {name!r} (not on this box)")
sys.meta_path.insert(0, Missing())
from eagle3_top.tui.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["check", "probe"])
def test_the_gate_commands_run_with_only_the_wire_libraries(command: str, tmp_path) -> None:
    import zmq

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)  # a live endpoint that says nothing: the command must get as far as waiting
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    ep = f"tcp://127.0.0.1:{port}"
    args = {
        "check": ["check", ep, "--timeout", "1"],
        "probe": ["probe", "--server", "http://127.0.0.1:9", "--endpoint", ep, "--manifest",
                  "examples/demo-manifest.json", "--timeout", "1"],
    }[command]  # fmt: skip
    try:
        r = subprocess.run(
            [sys.executable, "-c", HEADLESS, *args],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
            cwd=ROOT,
        )
    finally:
        pub.close(0)
        ctx.term()
    assert "Traceback" not in r.stderr and "No module named" not in r.stderr, r.stderr
    assert r.returncode == 2 and "no hello" in r.stderr, (r.returncode, r.stderr)
