"""A publisher that puts terminal escape sequences in every string field of every kind of frame:
what a compromised or buggy server could send a monitor. Real msgpack bytes of the v1 schema."""

from __future__ import annotations

import numpy as np
from eagle3_top.tracer.schema import AUX, HEALTH, HELLO, PROBE, STEP, encode, probe_body, step_body

# Each asks a terminal to do something: retitle it (OSC 0), type the cursor position back as input
# (CSI 6n), write the clipboard (OSC 52), reverse what follows (U+202E), the C1 form of CSI, and
# Rich markup that would style a cell or emit a hyperlink (OSC 8) if a table parsed it.
RETITLE = "\x1b]0;pwned\x07"
CURSOR_QUERY = "\x1b[6n"
CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"
BIDI = "\u202e"
C1_CSI = "\x9b"
MARKUP = "[link=file:///etc/passwd]x[/link][red]"
PIECES = (RETITLE, CURSOR_QUERY, CLIPBOARD, BIDI, C1_CSI, MARKUP)
ALL = "".join(PIECES)

# What none of those may become in the bytes a terminal receives.
FORBIDDEN = {
    "OSC 0 retitle": b"\x1b]0;pwned",
    "CSI 6n cursor query": b"\x1b[6n",
    "OSC 52 clipboard": b"\x1b]52;",
    "U+202E": BIDI.encode(),
    "C1 CSI": C1_CSI.encode(),  # UTF-8 C2 9B
    "OSC 8 hyperlink": b"\x1b]8;",
}


def hostile(tag: str) -> str:
    return f"{tag}{ALL}"


def rids() -> list[str]:
    """One request per piece, so that each shows in the table's 36 columns, and one with them all."""
    return [f"rq{i}{p}" for i, p in enumerate(PIECES)] + [hostile("rqall")]


def hello_body(algorithm: str) -> dict[str, object]:
    h = hostile
    spec = {"algorithm": algorithm, "num_steps": 3, "topk": 1, "num_draft_tokens": 4}
    return {
        "engine": {"name": h("engine"), "version": h("0.5.")},
        "model": {
            "target_path": h("/target"), "draft_path": h("/draft"), "arch": h("Arch"),
            "num_layers": 8, "hidden_size": 64, "vocab_size": 1000, "dtype": h("bf16"),
            "draft_arch": h("DraftArch"), "draft_vocab_size": 1000,
        },
        "tp": {"rank": 0, "size": 1},
        "spec": {
            "requested": {**spec, "num_steps": 5},
            "effective": spec,
            "rewrites": [{"param": h("num_steps"), "from": h("5"), "to": 3, "reason": h("because")}],
            "requested_source": h("argv"),
            "max_running_requests": {"requested": 8, "effective": 4},
        },
        "vocab": {"size": 1000, "sha256": h("sha"), "min_target": 0, "max_target": 999,
                  "unique_targets": 1000, "vocab_size": 1000},
        "aux": {
            "eagle_config": {h("key"): h("value")}, "declared_ids": [1, 3, 5],
            "ids_location": h("top_level"), "ids_read": None, "use_aux_hidden_state": True,
            "capture_native": [2, 4, 5], "capture_canonical": [1, 3, 4], "capture_source": h("layers"),
            "capture_note": h("note"), "family": h("llama"), "convention": h("convention"),
            "slots": 3, "width": 192, "expected_width": 256, "input_width": 192,
        },
        "wiring_error": h("wiring"),
        "claims": {"acc": [0.8, 0.6, 0.4], "simulated_acc_len": 2.5, "source": h("metrics.json")},
        "parallel": {"pp_rank": 0, "pp_size": 1, "dp_rank": 0},
    }  # fmt: skip


def step_frame(src: str, seq: int, ts: float, i: int) -> bytes:
    rs = rids()
    b = len(rs)
    rng = np.random.default_rng(i)
    acc = rng.integers(0, 3, b).astype(np.int32)
    body = step_body(
        step=i, rids=rs, draft=rng.integers(1, 900, (b, 4)).astype(np.int32), accept_lens=acc + 1,
        tokens=rng.integers(1, 900, int(acc.sum()) + b).astype(np.int32), dt=0.01,
    )  # fmt: skip
    return encode(STEP, src, seq, ts, body)


def frames(src: str, seq: int, ts: float, i: int, algorithm: str = "EAGLE3") -> list[bytes]:
    """One round of every kind from ``src``: a hello, a step, an aux sample, a probe, a health;
    ``seq`` is the first sequence number, ``i`` the step index."""
    h = hostile
    aux = {
        "step": i, "where": h("fc_input"), "rows": 8, "slots": 3, "slot_width": 64,
        "mean": [0.0] * 3, "rms": [1.0] * 3, "std": [1.0] * 3, "absmax": [3.0] * 3,
        "nan": [0] * 3, "inf": [0] * 3, "sketch": [[0.1] * 16 for _ in range(3)],
    }  # fmt: skip
    probe = probe_body(
        rid=h("e3t-probe-0-"),
        rows=np.ones((2, 192), np.float32),
        slots=3,
        slot_width=64,
        offset=0,
        input_ids=np.array([5, 6], np.int32),
    )
    health = {
        "sent": seq, "dropped": 0, "queue": 0, "queue_max": 4096, "hook_errors": 1, "encode_errors": 0,
        "disabled": False, "paused": False, "last_error": h("hook"), "engine_error": h("engine failed"),
        "started": 1.0, "final": False, "curve_refused": 0, "endpoint": h("tcp://"),
    }  # fmt: skip
    return [
        encode(HELLO, src, seq, ts, hello_body(algorithm)),
        step_frame(src, seq + 1, ts, i),
        encode(AUX, src, seq + 2, ts, aux),
        encode(PROBE, src, seq + 3, ts, probe),
        encode(HEALTH, src, seq + 4, ts, health),
    ]


# Two sources, so that the fleet view opens: one names an algorithm nobody knows.
SOURCES = ((hostile("evil") + ":1:r0", "EAGLE3"), ("box:2:r0", hostile("ALGO")))


def write_recording(path: str, rounds: int = 40, endpoint: str = hostile("tcp://rec")) -> None:
    """A recording of both sources, as ``eagle3-top record`` stores it, ten rounds a second."""
    from eagle3_top.tracer.reader.recording import RecordingWriter

    w = RecordingWriter(path, flush_interval_s=0.0)
    for i in range(rounds):
        t_ns = 1_780_000_000 * 10**9 + i * 10**8
        for src, algorithm in SOURCES:
            for f in frames(src, 5 * i, t_ns / 1e9, i, algorithm):
                w.add(f, endpoint, t_ns)
        w.tick()
    w.close()
