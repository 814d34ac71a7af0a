"""``eagle3-top demo``: two built-in engines, one wired as trained and one with the motivating bug.

The engines run in child processes (the built-in engine's own, ``commands.toy.engine_argv``), each publishing on its own loopback port;
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

from .toy import engine_argv

ENGINES = (
    ("healthy", "draft"),
    ("ids-not-read", "draft_ids_not_read"),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bundled_paths() -> dict[str, str]:
    out = subprocess.run(engine_argv(["--show-paths"]), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"eagle3-top demo: the built-in engine is unavailable: {out.stderr.strip()}")
    import json

    paths: dict[str, str] = json.loads(out.stdout)
    return paths


def start_engines(
    paths: dict[str, str], rate: float, log_dir: str
) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    procs, endpoints = [], []
    for name, draft_key in ENGINES:
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        cmd = engine_argv(
            [
                "--publish",
                endpoint,
                "--speculative-draft-model-path",
                paths[draft_key],
                "--max-steps-per-s",
                str(rate),
            ]
        )
        log = open(os.path.join(log_dir, f"{name}.log"), "wb")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        endpoints.append(endpoint)
    return procs, endpoints


def start_manifest_build(paths: dict[str, str], work_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    """Training data from the built-in target, then its manifest: what a user would build for the
    bundled draft. Runs beside the engines' start-up, a few seconds."""
    data, out = os.path.join(work_dir, "hidden_states"), os.path.join(work_dir, "manifest.json")
    cli = [sys.executable, "-m", "eagle3_top.tui.cli"]
    script = " && ".join(
        subprocess.list2cmdline(c)
        for c in (
            engine_argv(["gen-data", "--out", data, "--num-samples", "16"]),
            [*cli, "manifest", "build", "--draft", paths["draft"], "--data", data,
             "--target-config", paths["target"],
             "--metrics", os.path.join(paths["draft"], "training_metrics.json"), "--out", out],
        )
    )  # fmt: skip
    log = open(os.path.join(work_dir, "manifest.log"), "wb")
    proc = subprocess.Popen(
        script, shell=True, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    return proc, out


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
    ap.add_argument("--no-manifest", action="store_true", help="skip building the training manifest")
    ns = ap.parse_args(argv)
    log_dir = tempfile.mkdtemp(prefix="eagle3-top-demo-")
    paths = bundled_paths()
    builder = None if ns.no_manifest else start_manifest_build(paths, log_dir)
    procs, endpoints = start_engines(paths, ns.rate, log_dir)
    atexit.register(stop_engines, procs)

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop_engines(procs)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    from eagle3_top.tracer.analysis.manifest import Manifest, ManifestError, load_manifest
    from eagle3_top.tui.app import run_app

    manifest: Manifest | None = None
    if builder is not None:
        proc, path = builder
        print("eagle3-top demo: building the training manifest of the bundled draft ...", flush=True)
        try:
            if proc.wait(timeout=120) == 0:
                manifest = load_manifest(path)
        except (subprocess.TimeoutExpired, ManifestError):
            proc.kill()
        if manifest is None:
            print(
                f"eagle3-top demo: no manifest (see {log_dir}/manifest.log); structural checks only",
                flush=True,
            )
    try:
        run_app(endpoints, title="eagle3-top demo — healthy vs ids-not-read", manifest=manifest)
    finally:
        stop_engines(procs)
    print(f"eagle3-top demo: engine logs in {log_dir}")
    return 0
