"""A subscriber written from docs/protocol.md alone — plain pyzmq, msgpack and numpy, no project
code — against `eagle3-top toy --publish`, healthy and mis-wired."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import msgpack
import numpy as np
import pytest
import zmq
from patience import HANG_GUARD_S, PATIENCE_S

pytest.importorskip("torch")

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]


def _paths() -> dict[str, str]:
    out = subprocess.run([*CLI, "toy", "--show-paths"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _read_stream(draft: str, steps: int = 120) -> tuple[dict, list[dict], list[int]]:
    endpoint = _endpoint()
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)  # before the publisher exists: nothing is missed from its start
    proc = subprocess.Popen(
        [*CLI, "toy", "--publish", endpoint, "--speculative-draft-model-path", draft,
         "--max-steps-per-s", "150", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    hello, step_events, seqs = None, [], []
    try:
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline and len(step_events) < steps:
            if not sock.poll(200):
                continue
            ev = msgpack.unpackb(sock.recv(), raw=False)
            assert ev["v"] == 1
            seqs.append(ev["seq"])
            if ev["kind"] == "hello":
                hello = ev
            elif ev["kind"] == "step":
                step_events.append(ev)
    finally:
        proc.terminate()
        proc.wait(timeout=HANG_GUARD_S)
        sock.close(0)
    assert hello is not None and len(step_events) >= steps
    return hello, step_events, seqs


def _mean_accept_length(step_events: list[dict]) -> float:
    acc = np.concatenate([np.frombuffer(e["accepted"], "<i4") for e in step_events])
    return float((acc + 1).mean())


def test_healthy_and_miswired_from_the_protocol_page() -> None:
    paths = _paths()
    hello, steps, seqs = _read_stream(paths["draft"])
    # no gaps at a modest rate: seq numbers are consecutive from the first event
    assert sorted(seqs) == list(range(seqs[0], seqs[0] + len(seqs)))
    assert hello["spec"]["effective"]["num_draft_tokens"] == 4
    assert hello["aux"]["capture_canonical"] == [-1, 2, 5]
    for e in steps:
        b, n = e["batch"], e["n"]
        draft = np.frombuffer(e["draft"], "<i4").reshape(b, n)
        acc = np.frombuffer(e["accepted"], "<i4")
        tokens = np.frombuffer(e["tokens"], "<i4")
        assert len(e["rids"]) == b and tokens.size == acc.sum() + b
        # in a chain the accepted drafts are the first committed tokens of each request
        offsets = np.concatenate([[0], np.cumsum(acc + 1)])
        for i in range(b):
            np.testing.assert_array_equal(tokens[offsets[i] : offsets[i] + acc[i]], draft[i, 1 : 1 + acc[i]])
    assert _mean_accept_length(steps) >= 2.5

    hello_bad, steps_bad, _ = _read_stream(paths["draft_ids_not_read"])
    assert hello_bad["aux"]["ids_read"] is None
    assert hello_bad["aux"]["capture_canonical"] == [1, 3, 4]
    assert _mean_accept_length(steps_bad) <= 1.6
