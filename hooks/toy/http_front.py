"""The built-in engine's HTTP front: the subset of SGLang's HTTP API that probes need.

``POST /generate`` (also ``PUT``) with ``{"input_ids": [...] | [[...], ...], "rid": str | [str],
"sampling_params": {"max_new_tokens", "temperature"}}`` answers like SGLang:
``{"text": "", "output_ids": [...], "meta_info": {"id", "prompt_tokens", "completion_tokens",
"spec_verify_ct", "spec_accept_length", "spec_accept_histogram", "finish_reason", ...}}`` (a list
for a batch). ``GET /health``, ``/health_generate``, ``/get_model_info``, ``/get_server_info``. Errors are SGLang-shaped:
HTTP 400 with ``{"error": {"message": ...}}``.

Standard library only (``ThreadingHTTPServer`` in a daemon thread, loopback only). The engine is not
thread-safe: handler threads queue jobs, and the thread that owns the engine runs ``serve_once``,
which batches whatever is queued. This module does not import the tracer.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .engine import Req

REQUEST_TIMEOUT_S = 600.0
MAX_BODY = 64 << 20


class BadRequest(ValueError):
    pass


@dataclass
class Job:
    reqs: list[Req]
    single: bool
    t0: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


def _int_list(v: Any, what: str) -> list[int]:
    if not isinstance(v, list) or not v:
        raise BadRequest(f"{what} must be a non-empty list of token ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        raise BadRequest(f"{what} must hold integers only")
    return list(v)


class ToyHTTPFront:
    def __init__(self, engine: Any, port: int, host: str = "127.0.0.1") -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the toy HTTP front binds loopback only, not {host!r}")
        sa = engine.server_args
        self.engine_info = {
            "model_path": sa.model_path,
            "draft_model_path": sa.speculative_draft_model_path,
            "vocab_size": int(engine.target.config.vocab_size),
            "num_draft_tokens": int(engine.width),
        }
        self.context_length = int(engine.context_length)
        # SGLang's /get_server_info keys for what this engine runs (one process: TP 1, DP 1)
        self.server_info = {
            "model_path": sa.model_path,
            "speculative_algorithm": sa.speculative_algorithm,
            "speculative_draft_model_path": sa.speculative_draft_model_path,
            "speculative_num_steps": sa.effective.num_steps,
            "speculative_eagle_topk": sa.effective.topk,
            "speculative_num_draft_tokens": sa.effective.num_draft_tokens,
            "tp_size": 1,
            "dp_size": 1,
            "context_length": self.context_length,
            "version": "built-in",
        }
        self.jobs: queue.Queue[Job] = queue.Queue()
        self._closed = False
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def _send(self, code: int, payload: Any) -> None:
                body = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, message: str) -> None:
                self._send(code, {"error": {"message": message}})

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/health", "/health_generate"):
                    self._send(200, None)
                elif path == "/get_model_info":
                    self._send(200, front.model_info())
                elif path == "/get_server_info":
                    self._send(200, front.server_info)
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                if path != "/generate":
                    self._send(404, {"detail": "Not Found"})
                    return
                try:
                    n = int(self.headers.get("Content-Length") or 0)
                    if n <= 0 or n > MAX_BODY:
                        raise BadRequest("a JSON body is required")
                    payload = json.loads(self.rfile.read(n))
                    job = front.parse(payload)
                except BadRequest as exc:
                    self._error(400, str(exc))
                    return
                except ValueError as exc:
                    self._error(400, f"invalid JSON: {exc}")
                    return
                if front._closed:
                    self._error(503, "the engine is shutting down")
                    return
                front.jobs.put(job)
                if not job.done.wait(REQUEST_TIMEOUT_S):
                    self._error(504, "the engine did not finish the request in time")
                elif job.error is not None:
                    self._error(
                        500 if not job.error.startswith("400:") else 400, job.error.removeprefix("400:")
                    )
                else:
                    out = [front.answer(r, job) for r in job.reqs]
                    self._send(200, out[0] if job.single else out)

            do_PUT = do_POST

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="toy-http", daemon=True)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> ToyHTTPFront:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        while True:  # whoever is still waiting gets an answer
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            job.error = "the engine is shutting down"
            job.done.set()

    # -- requests ---------------------------------------------------------------------------------

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.engine_info["model_path"],
            "tokenizer_path": None,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "context_length": self.context_length,
            "version": "built-in",
        }

    def parse(self, payload: Any) -> Job:
        """A /generate body as engine requests; raises BadRequest with SGLang-like messages."""
        if not isinstance(payload, dict):
            raise BadRequest("the request body must be a JSON object")
        if payload.get("input_ids") is None:
            if payload.get("text") is not None:
                raise BadRequest("the built-in engine has no tokenizer: send input_ids, not text")
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        if payload.get("stream"):
            raise BadRequest("stream is not supported by the built-in engine")
        ids = payload["input_ids"]
        single = not (isinstance(ids, list) and ids and isinstance(ids[0], list))
        prompts = [_int_list(ids, "input_ids")] if single else [_int_list(p, "input_ids[i]") for p in ids]
        rid = payload.get("rid")
        if rid is None:
            rids = [f"toy-http-{time.monotonic_ns()}-{i}" for i in range(len(prompts))]
        elif isinstance(rid, list):
            if len(rid) != len(prompts) or not all(isinstance(r, str) for r in rid):
                raise BadRequest("rid must be a string or a list of strings, one per input")
            rids = list(rid)
        elif isinstance(rid, str):
            rids = [rid] if single else [f"{rid}_{i}" for i in range(len(prompts))]
        else:
            raise BadRequest("rid must be a string or a list of strings")
        sp = payload.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        max_new = sp.get("max_new_tokens", 128)
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
            raise BadRequest(f"max_new_tokens must be a positive integer, got {max_new!r}")
        temp = sp.get("temperature", 1.0)
        if not isinstance(temp, (int, float)) or temp < 0:
            raise BadRequest(f"temperature must be a non-negative number, got {temp!r}")
        vocab = self.engine_info["vocab_size"]
        ctx = self.context_length
        for p in prompts:
            bad = [t for t in p if not 0 <= t < vocab]
            if bad:
                raise BadRequest(f"token id {bad[0]} is out of range for a vocabulary of {vocab}")
            if len(p) >= ctx:
                raise BadRequest(
                    f"The input ({len(p)} tokens) is longer than the model's context length ({ctx} tokens)."
                )
            if len(p) + max_new > ctx:
                raise BadRequest(
                    f"Requested token count exceeds the model's maximum context length of {ctx} tokens. "
                    f"You requested a total of {len(p) + max_new} tokens: {len(p)} tokens from the input "
                    f"messages and {max_new} tokens for the completion. Please reduce the number of tokens "
                    "in the input messages or the completion to fit within the limit."
                )
        reqs = [Req(rid=r, prompt=p, max_new_tokens=max_new) for r, p in zip(rids, prompts, strict=True)]
        return Job(reqs, single)

    def answer(self, r: Req, job: Job) -> dict[str, Any]:
        n = self.engine_info["num_draft_tokens"]
        verify = r.spec_verify_ct
        completion = len(r.output_ids)
        hist = list(r.spec_correct_drafts_histogram)
        return {
            "text": "",
            "output_ids": list(r.output_ids),
            "meta_info": {
                "id": r.rid,
                "finish_reason": {"type": "length", "length": r.max_new_tokens},
                "prompt_tokens": len(r.prompt),
                "completion_tokens": completion,
                "cached_tokens": 0,
                "e2e_latency": time.monotonic() - job.t0,
                "spec_verify_ct": verify,
                # SGLang: completion_tokens / spec_verify_ct (the prefill's token included)
                "spec_accept_length": completion / verify if verify else 0.0,
                "spec_accept_rate": r.spec_num_correct_drafts / (verify * (n - 1))
                if verify and n > 1
                else 0.0,
                "spec_num_correct_drafts": r.spec_num_correct_drafts,
                "spec_num_proposed_drafts": verify * (n - 1),
                "spec_correct_drafts_histogram": hist,
                # index k: verify steps with accept length k + 1 (k drafts accepted, plus the bonus)
                "spec_accept_histogram": hist,
            },
        }

    # -- engine side (call from the thread that owns the engine) ---------------------------------

    def serve_once(self, engine: Any, timeout: float = 0.1, on_step: Any = None) -> int:
        """Wait up to ``timeout`` for work, then run everything queued as batches; returns requests served."""
        try:
            first = self.jobs.get(timeout=timeout)
        except queue.Empty:
            return 0
        jobs = [first]
        while True:
            try:
                jobs.append(self.jobs.get_nowait())
            except queue.Empty:
                break
        reqs = [r for j in jobs for r in j.reqs]
        try:
            engine.run_requests(reqs, on_step=on_step)
        except KeyboardInterrupt:
            for j in jobs:
                j.error = "the engine is shutting down"
                j.done.set()
            raise
        except Exception as exc:  # one bad batch must not take the server down
            engine.batch = None
            for j in jobs:
                j.error = f"{type(exc).__name__}: {exc}"
        for j in jobs:
            j.done.set()
        return len(reqs)
