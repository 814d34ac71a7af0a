"""Regenerate examples/demo.mcap and examples/demo-manifest.json: the two built-in engines of
`eagle3-top demo` (healthy, and ids-not-read: mis-wired) recorded for a short session.

    .venv/bin/python examples/make_demo_recording.py [--seconds 30] [--rate 20]

Needs the full set-up (`make demo` or `make test` made it): the engines run torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=20.0, help="verify steps per second per engine")
    p.add_argument("--out", default=os.path.join(HERE, "demo.mcap"))
    p.add_argument("--manifest-out", default=os.path.join(HERE, "demo-manifest.json"))
    ns = p.parse_args()
    from eagle3_top.hooks.toy import paths

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "hidden_states")
        subprocess.run([*CLI, "toy", "gen-data", "--out", data, "--num-samples", "16"], check=True)
        subprocess.run(
            [*CLI, "manifest", "build", "--draft", paths.draft_dir(), "--data", data,
             "--target-config", paths.target_dir(),
             "--metrics", os.path.join(paths.draft_dir(), "training_metrics.json"), "--out", ns.manifest_out],
            check=True,
        )  # fmt: skip
    endpoints = [free_endpoint(), free_endpoint()]
    recorder = subprocess.Popen([*CLI, "record", *endpoints, "-o", ns.out, "--force"])
    time.sleep(1.0)  # connected before the first hello: the recording holds the whole session
    engines = [
        subprocess.Popen(
            [
                *CLI,
                "toy",
                "--publish",
                ep,
                "--max-steps-per-s",
                str(ns.rate),
                "--speculative-draft-model-path",
                draft,
            ],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for ep, draft in zip(endpoints, (paths.draft_dir(), paths.draft_ids_not_read_dir()), strict=True)
    ]
    time.sleep(ns.seconds)
    for e in engines:
        e.terminate()
    for e in engines:
        e.wait(timeout=30)
    time.sleep(1.0)  # their goodbyes
    recorder.send_signal(signal.SIGTERM)
    return recorder.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
