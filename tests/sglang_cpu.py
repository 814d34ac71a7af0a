"""SGLang's real classes on a CPU-only machine, for the sglang tests only.

The stand-ins for the GPU-only packages SGLang imports (triton, sgl_kernel, flashinfer, ...) live in
the product, ``eagle3_top.hooks.sglang.cpu_standins`` (``python -m eagle3_top.hooks.sglang.observe``
uses them too); this module re-exports them and adds the test-only helpers: child interpreters with
the stand-ins installed (``run_in_sglang_subprocess``, ``start_child``, ``run_child``, ...).

Nothing here installs anything at import time of the test suite: the sglang tests call it inside a
subprocess (``run_in_sglang_subprocess``) or a fixture, so the stand-ins cannot leak into other
tests' ``sys.modules``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

from eagle3_top.hooks.sglang.cpu_standins import (  # noqa: F401  (re-exported for the tests)
    STANDIN_ROOTS,
    StandIn,
    StandInFinder,
    init_process_group,
    install_standins,
    publish_server_args,
)
from patience import HANG_GUARD_S

# -- subprocess isolation ---------------------------------------------------------------------------

PRELUDE = """
import sys
sys.path.insert(0, {tests_dir!r})
import sglang_cpu
sglang_cpu.install_standins()
"""


class Child:
    """A started child interpreter. Its output goes to temporary files, not pipes: a parent busy
    with something else (a subscriber) cannot make it block on a full pipe."""

    def __init__(self, code: str, env: dict[str, str]) -> None:
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=self._out, stderr=self._err, env=env
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = HANG_GUARD_S) -> str:
        """Wait for it to exit; return its stdout. Raises AssertionError with its stderr when it exits
        non-zero, or when it is still running at ``timeout`` (hung: it is killed)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            hung = True
        else:
            hung = False
        out, err = (self._read(f) for f in (self._out, self._err))
        if self.proc.returncode != 0:
            what = f"hung, killed after {timeout:.0f} s" if hung else f"rc={self.proc.returncode}"
            raise AssertionError(
                f"sglang subprocess failed ({what})\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-8000:]}"
            )
        return out

    @staticmethod
    def _read(f: Any) -> str:
        f.seek(0)
        text = f.read().decode(errors="replace")
        f.close()
        return str(text)


def start_sglang_subprocess(body: str, *, env: dict[str, str] | None = None) -> Child:
    """Start ``body`` in a fresh interpreter with the stand-ins installed."""
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    code = PRELUDE.format(tests_dir=tests_dir) + textwrap.dedent(body)
    full_env = dict(os.environ)
    full_env.setdefault("CUDA_VISIBLE_DEVICES", "")
    full_env["PYTHONUNBUFFERED"] = "1"
    # each child its own rendezvous port (a test that shares one between ranks says so in ``env``):
    # one inherited from the worker's environment was held by another child at three at a time
    full_env["MASTER_PORT"] = str(free_port())
    if env:
        full_env.update(env)
    return Child(code, full_env)


def run_in_sglang_subprocess(
    body: str, *, env: dict[str, str] | None = None, timeout: float = HANG_GUARD_S
) -> str:
    """Run ``body`` in a fresh interpreter with the stand-ins installed; return its stdout.

    Raises AssertionError with the child's stderr when it exits non-zero.
    """
    return start_sglang_subprocess(body, env=env).finish(timeout)


# -- scenario children: a test module's ``child_*`` function, run in a child, its result as JSON ------

MARK = "@@E3T-RESULT@@"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_body(module: str, func: str) -> str:
    return f"""
import json, {module} as t
out = t.{func}()
print({MARK!r} + json.dumps(out))
"""


def child_result(stdout: str) -> dict[str, Any]:
    import json

    for line in stdout.splitlines():
        if line.startswith(MARK):
            result: dict[str, Any] = json.loads(line[len(MARK) :])
            return result
    raise AssertionError(f"child printed no result:\n{stdout[-3000:]}")


def start_child(module: str, func: str, env: dict[str, str] | None = None) -> Child:
    """Start ``module.func()`` in a child with the stand-ins; ``child_result(child.finish())`` reads it."""
    return start_sglang_subprocess(_child_body(module, func), env=env)


def run_child(module: str, func: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return child_result(start_child(module, func, env).finish())
