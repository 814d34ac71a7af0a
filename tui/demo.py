"""``eagle3-top demo``: two built-in engines, one wired as trained and one with the motivating bug.

The engines run in child processes (``eagle3-top toy``), each publishing on its own loopback port;
the monitor opens on both. Closing the monitor stops them, and so does any way out of this
process that Python gets to see (exceptions, SIGTERM).
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
from types import FrameType

ENGINES = (
    ("healthy", "draft"),
    ("ids-not-read", "draft_ids_not_read"),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bundled_paths() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "eagle3_top.tui.cli", "toy", "--show-paths"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"eagle3-top demo: the built-in engine is unavailable: {out.stderr.strip()}")
    import json

    paths: dict[str, str] = json.loads(out.stdout)
    return paths


def start_engines(rate: float, log_dir: str) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    paths = bundled_paths()
    procs, endpoints = [], []
    for name, draft_key in ENGINES:
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        cmd = [
            sys.executable, "-m", "eagle3_top.tui.cli", "toy",
            "--publish", endpoint,
            "--speculative-draft-model-path", paths[draft_key],
            "--max-steps-per-s", str(rate),
        ]  # fmt: skip
        log = open(os.path.join(log_dir, f"{name}.log"), "wb")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        endpoints.append(endpoint)
    return procs, endpoints


def stop_engines(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="eagle3-top demo", description=__doc__)
    ap.add_argument("--rate", type=float, default=40.0, help="verify steps per second per engine")
    ns = ap.parse_args(argv)
    log_dir = tempfile.mkdtemp(prefix="eagle3-top-demo-")
    procs, endpoints = start_engines(ns.rate, log_dir)
    atexit.register(stop_engines, procs)

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop_engines(procs)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    from .app import run_app

    try:
        run_app(endpoints, title="eagle3-top demo — healthy vs ids-not-read")
    finally:
        stop_engines(procs)
    print(f"eagle3-top demo: engine logs in {log_dir}")
    return 0
