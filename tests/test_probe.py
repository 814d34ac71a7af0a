"""`eagle3-top probe`: the slot comparison, the built-in engine over real HTTP and a real stream,
the command's exit codes, SGLang's prefill segmentation, and the TUI's probe panel."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from array import array
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import HANG_GUARD_S, PATIENCE_S, screen_text, wait_until
from eagle3_top.tracer.analysis.manifest import load_manifest
from eagle3_top.tracer.analysis.probe_compare import compare, mapping_text, similarity_matrix, slot_mapping
from eagle3_top.tracer.analysis.probe_run import probe_rid
from eagle3_top.tracer.schema import (
    PROBE,
    PROBE_MARKER,
    Hello,
    SourceId,
    decode,
    encode,
    is_probe_rid,
    probe_body,
    probe_view,
)
from toy_process import Toy

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
W = 16


def _rows(rng: np.random.Generator, r: int, slots: int) -> np.ndarray:
    return rng.standard_normal((r, slots * W)).astype(np.float32)


# -- the comparison ----------------------------------------------------------------------------------


@pytest.mark.parametrize("perm", [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1]])
def test_matrix_recovers_a_known_permutation(perm) -> None:
    rng = np.random.default_rng(1)
    trained = _rows(rng, 40, 3)
    served = trained.reshape(40, 3, W)[:, perm].reshape(40, -1) * 3.0  # scale does not matter
    m = similarity_matrix(served, trained, W)
    assert m.shape == (3, 3)
    assert slot_mapping(m) == perm
    for i, j in enumerate(perm):
        assert m[i, j] > 0.999
        assert all(abs(m[i, k]) < 0.3 for k in range(3) if k != j)


def test_mapping_names_unmatched_and_missing_slots() -> None:
    rng = np.random.default_rng(2)
    trained = _rows(rng, 30, 3)
    t = trained.reshape(30, 3, W)
    served = np.stack([t[:, 1], rng.standard_normal((30, W)).astype(np.float32)], axis=1).reshape(30, -1)
    m = similarity_matrix(served, trained, W)
    mp = slot_mapping(m)
    assert m.shape == (2, 3) and mp == [1, None]
    text = mapping_text(m, mp, [-1, 2, 5], [2, 30])
    assert "served slot 0 (layer 2) matches trained slot 1 (layer 2)" in text
    assert "served slot 1 (layer 30) matches nothing trained" in text
    assert "not served: trained slot 0 (layer -1), trained slot 2 (layer 5)" in text


def test_probe_body_roundtrip_and_compare_with_offset() -> None:
    rng = np.random.default_rng(3)
    trained = _rows(rng, 20, 3)
    ids = list(range(100, 120))
    rid = probe_rid(7)
    assert rid.startswith(f"{PROBE_MARKER}-7-") and is_probe_rid(rid) and not is_probe_rid("req-1")
    # a radix-cache hit: only positions 5.. were computed
    body = probe_body(rid=rid, rows=trained[5:], slots=3, slot_width=W, offset=5, input_ids=ids[5:])
    ev = decode(encode(PROBE, "h:1:r0", 0, 0.0, body))
    rows = probe_view(ev.body)
    assert (rows.rid, rows.offset, rows.rows, rows.slots, rows.slot_width) == (rid, 5, 15, 3, W)
    c = compare(rows, ids, trained, W)
    assert c.ok and c.rows == 15 and min(c.diagonal) > 0.999  # float16 on the wire, float32 compare


# -- SGLang's prefill draft-extend, segmented per request -------------------------------------------------


def test_sglang_prefill_rows_are_segmented_per_request(recording_pub) -> None:
    torch = pytest.importorskip("torch")
    from eagle3_top.hooks.sglang.probe import make_around_prefill_extend
    from eagle3_top.tracer.serving.tracer import Tracer

    pub = recording_pub
    tracer = Tracer(pub)  # type: ignore[arg-type]
    tracer.set_slot_width(4)
    hidden = torch.arange(9 * 12, dtype=torch.float32).reshape(9, 12)
    # SGLang's Req keeps the prompt on the host as origin_input_ids (a list, or an array('q'))
    reqs = [
        SimpleNamespace(rid="req-a", origin_input_ids=[1, 2, 3, 4], output_ids=array("q")),
        SimpleNamespace(rid="e3t-probe-0-x", origin_input_ids=[9, 8, 7, 6, 5, 4, 3], output_ids=array("q")),
        # resumed after a retraction: its prompt and what it had generated are prefilled again
        SimpleNamespace(rid="e3t-probe-1-y", origin_input_ids=array("q", [5]), output_ids=array("q", [6])),
    ]
    batch = SimpleNamespace(
        reqs=reqs, extend_lens=[4, 3, 2], prefix_lens=[0, 4, 0], input_ids=torch.zeros(9, dtype=torch.long)
    )
    seen = []
    around = make_around_prefill_extend(lambda _w: tracer)
    around(lambda self, b, h, n: seen.append(h.shape), object(), batch, hidden, torch.zeros(3))
    assert seen == [(9, 12)]  # the original ran, unchanged
    bodies = [b.resolve() for k, b in pub.events if k == PROBE]  # type: ignore[attr-defined]
    assert [b["rid"] for b in bodies] == ["e3t-probe-0-x", "e3t-probe-1-y"]
    first = probe_view(bodies[0])
    assert (first.offset, first.rows, first.slots, first.slot_width) == (4, 3, 3, 4)
    assert first.input_ids.tolist() == [5, 4, 3]
    np.testing.assert_allclose(first.aux, hidden[4:7].numpy())
    assert probe_view(bodies[1]).input_ids.tolist() == [5, 6]
    assert pub.hook_errors == 0, pub.last_error


# -- the built-in engine over HTTP, the command end to end ----------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def toys() -> Iterator[dict[str, Toy]]:
    pytest.importorskip("torch")
    from eagle3_top.hooks.toy import paths

    started = {
        "healthy": Toy(),
        "miswired": Toy("--speculative-draft-model-path", paths.draft_ids_not_read_dir()),
    }
    try:
        yield started
    finally:
        for t in started.values():
            t.stop()


@pytest.fixture(scope="module")
def manifest(tmp_path_factory, toys) -> str:
    from eagle3_top.hooks.toy import paths

    root = tmp_path_factory.mktemp("probe")
    data = root / "hidden_states"
    subprocess.run(
        [*CLI, "toy", "gen-data", "--out", str(data), "--num-samples", "8", "--new-tokens", "20"],
        check=True, capture_output=True,
    )  # fmt: skip
    out = root / "m.json"
    subprocess.run(
        [*CLI, "manifest", "build", "--draft", paths.draft_dir(), "--data", str(data),
         "--target-config", paths.target_dir(), "--metrics", f"{paths.draft_dir()}/training_metrics.json",
         "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    for t in toys.values():
        t.wait_ready()
    return str(out)


def probe(server: str, endpoint: str, manifest: str, *extra: str) -> tuple[int, list[dict], str, float]:
    t0 = time.monotonic()
    r = subprocess.run(
        [*CLI, "probe", "--server", server, "--endpoint", endpoint, "--manifest", manifest, "--json", *extra],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    findings = json.loads(r.stdout) if r.stdout.strip().startswith("[") else []
    return r.returncode, findings, r.stderr, time.monotonic() - t0


def test_toy_speaks_sglang_generate(toys, manifest) -> None:
    t = toys["healthy"]
    req = urllib.request.Request(
        t.url + "/generate",
        data=json.dumps(
            {
                "input_ids": [3, 4, 5, 6],
                "rid": "r-1",
                "sampling_params": {"max_new_tokens": 9, "temperature": 0},
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=PATIENCE_S) as r:
        out = json.loads(r.read())
    meta = out["meta_info"]
    assert out["text"] == "" and len(out["output_ids"]) == 9
    assert (meta["id"], meta["prompt_tokens"], meta["completion_tokens"]) == ("r-1", 4, 9)
    assert meta["finish_reason"] == {"type": "length", "length": 9}
    assert meta["spec_accept_length"] == pytest.approx(9 / meta["spec_verify_ct"])
    assert sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"]
    with urllib.request.urlopen(t.url + "/get_model_info", timeout=PATIENCE_S) as r:
        assert json.loads(r.read())["is_generation"] is True
    with urllib.request.urlopen(t.url + "/get_server_info", timeout=PATIENCE_S) as r:
        info = json.loads(r.read())
    assert (info["speculative_algorithm"], info["speculative_num_draft_tokens"], info["dp_size"]) == (
        "EAGLE3",
        4,
        1,
    )


def test_healthy_engine_matches_every_slot(toys, manifest) -> None:
    t = toys["healthy"]
    rc, findings, err, _ = probe(t.url, t.endpoint, manifest, "--samples", "3")
    assert rc == 0, err
    assert [f["code"] for f in findings] == ["PROBE_OK"]
    ev = findings[0]["evidence"]
    m = np.asarray(ev["matrix"])
    assert m.shape == (3, 3) and np.diag(m).min() >= 0.99
    assert ev["mapping"] == [0, 1, 2] and ev["samples"] == 3 and ev["rows"] == 3 * 64
    assert ev["probe_accept_length"] > 3.0  # the training continuation: the draft knows it well
    assert "no live traffic seen" in findings[0]["message"]


def test_miswired_engine_is_a_probe_mismatch(toys, manifest) -> None:
    t = toys["miswired"]
    rc, findings, err, _ = probe(t.url, t.endpoint, manifest, "--samples", "2")
    assert rc == 1, err
    codes = [f["code"] for f in findings]
    assert "PROBE_MISMATCH" in codes and "LAYER_MAP_MISMATCH" in codes
    pm = next(f for f in findings if f["code"] == "PROBE_MISMATCH")
    m = np.asarray(pm["evidence"]["matrix"])
    assert np.diag(m).min() < 0.99 and pm["evidence"]["mapping"] != [0, 1, 2]
    assert "served slot 0 (layer 1) matches nothing trained" in pm["message"]
    assert "not served: trained slot 0 (layer -1)" in pm["message"]
    assert pm["evidence"]["probe_accept_length"] < 2.0  # low on the training samples too: wiring


def _one_line_exit_2(rc: int, err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("eagle3-top probe: ")
    assert all(w in lines[0] for w in words), lines[0]


def test_bad_inputs_exit_2_with_one_line(toys, manifest, tmp_path) -> None:
    healthy, miswired = toys["healthy"], toys["miswired"]
    m = json.loads(open(manifest).read())
    # a manifest without probe samples
    empty = tmp_path / "no-probes.json"
    empty.write_text(json.dumps({**m, "probes": []}))
    rc, _, err, _ = probe(healthy.url, healthy.endpoint, str(empty))
    _one_line_exit_2(rc, err, "no probe samples")
    # a sample longer than the server's context
    long = tmp_path / "long.json"
    p0 = dict(m["probes"][0], input_ids=(m["probes"][0]["input_ids"] * 10)[:600])
    long.write_text(json.dumps({**m, "probes": [p0]}))
    rc, _, err, _ = probe(healthy.url, healthy.endpoint, str(long))
    _one_line_exit_2(rc, err, "HTTP 400", "longer than the model's context length (512 tokens)")
    # the stream of another server: it never shows our probe rows
    rc, _, err, _ = probe(healthy.url, miswired.endpoint, manifest, "--timeout", "8")
    _one_line_exit_2(rc, err, "never showed the probe rows")
    # nothing publishing at the endpoint
    rc, _, err, _ = probe(healthy.url, f"tcp://127.0.0.1:{free_port()}", manifest, "--timeout", "2")
    _one_line_exit_2(rc, err, "no hello within 2s")
    # no server at the URL
    rc, _, err, _ = probe(f"http://127.0.0.1:{free_port()}", healthy.endpoint, manifest, "--timeout", "5")
    _one_line_exit_2(rc, err, "cannot reach")


class _NotSGLang(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = b'{"answer": 42}' if self.path == "/generate" else b"nope"
        self.send_response(200 if self.path == "/generate" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_not_an_sglang_server_is_exit_2(toys, manifest) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _NotSGLang)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        rc, _, err, _ = probe(url, toys["healthy"].endpoint, manifest, "--timeout", "5")
        _one_line_exit_2(rc, err, "no meta_info", "not an SGLang-compatible")
    finally:
        srv.shutdown()
        srv.server_close()


def test_probe_over_curve_needs_the_keys(manifest, tmp_path) -> None:
    """A CURVE-encrypted server stream: the probe reads it with the client's certificate, and a
    probe without one never sees the stream (exit 2, one line), while the HTTP side is unaffected."""
    from eagle3_top.tracer.transport import curve

    server_pub, server_sec = curve.generate(str(tmp_path / "server"), "server")
    _, client_sec = curve.generate(str(tmp_path / "clients"), "probe")
    t = Toy("--curve-secret", server_sec, "--curve-clients", str(tmp_path / "clients"))
    try:
        t.wait_ready()
        keys = ("--curve-server-key", server_pub, "--curve-client-secret", client_sec)
        rc, findings, err, _ = probe(t.url, t.endpoint, manifest, "--samples", "2", *keys)
        assert rc == 0, err
        assert [f["code"] for f in findings] == ["PROBE_OK"]
        rc, _, err, _ = probe(t.url, t.endpoint, manifest, "--samples", "1", "--timeout", "3")
        _one_line_exit_2(rc, err, "no hello within 3s")
        rc, _, err, _ = probe(t.url, t.endpoint, manifest, "--curve-server-key", server_pub)
        _one_line_exit_2(rc, err, "CURVE needs both")
    finally:
        t.stop()


# -- the TUI's probe panel ----------------------------------------------------------------------------


async def test_probe_panel_shows_matrix_and_verdict(manifest) -> None:
    from eagle3_top.tracer.serving.publisher import Publisher
    from eagle3_top.tui.app import Eagle3TopApp

    man = load_manifest(manifest)
    p = man.probes[0]
    rows = p.rows
    hello = {
        "engine": {"name": "toy", "version": "test"},
        "model": {"arch": "LlamaForCausalLM", "num_layers": 8, "hidden_size": 128},
        "aux": {"capture_canonical": [-1, 2, 5], "slots": 3, "width": 384, "expected_width": 384},
    }
    pub = Publisher("tcp://127.0.0.1:0", SourceId.local(engine="toy"), hello_interval_s=0.1)
    pub.set_hello(Hello.from_body(hello))
    app = Eagle3TopApp([pub.bound_endpoint], refresh_hz=20, manifest=man)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(pilot, lambda: app.latest and app.latest.sources, what="hello")
            assert "none yet" in screen_text(app)
            # served slots 0 and 1 swapped: the panel names the mapping
            t = rows.reshape(rows.shape[0], 3, -1)
            swapped = t[:, [1, 0, 2]].reshape(rows.shape[0], -1)
            pub.publish(
                PROBE,
                probe_body(
                    rid=probe_rid(0),
                    rows=swapped,
                    slots=3,
                    slot_width=128,
                    offset=0,
                    input_ids=p.input_ids,
                ),
            )
            await wait_until(pilot, lambda: "MISMATCH" in screen_text(app), what="mismatch verdict")
            assert "s0→t1 s1→t0 s2→t2" in screen_text(app)
            pub.publish(
                PROBE,
                probe_body(
                    rid=probe_rid(0), rows=rows, slots=3, slot_width=128, offset=0, input_ids=p.input_ids
                ),
            )
            await wait_until(pilot, lambda: "ok: slots match" in screen_text(app), what="ok verdict")
            assert "diagonal ok, 64 rows" in screen_text(app)
    finally:
        pub.close(0.5)
