"""Import direction (DESIGN.md §2), checked in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
        ("tracer", ["textual", "sglang", "torch"], []),
        ("tui", ["torch", "sglang"], []),
        ("hooks", ["textual"], ["sglang"]),
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
