"""The one HTTP call the analysis makes, a prompt of token ids: SGLang's ``/generate`` or an
OpenAI-compatible ``/v1/completions`` (vLLM's), stdlib only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class GenerateError(RuntimeError):
    """The server could not be reached or did not answer as SGLang's /generate does; one line."""


def base_url(server: str) -> str:
    base = server.rstrip("/")
    return base if "://" in base else "http://" + base


def completions(url: str, rid: str, input_ids: list[int], max_tokens: int, timeout: float) -> dict[str, Any]:
    """An OpenAI-compatible ``/v1/completions`` (vLLM's) for a prompt of token ids, its request id
    in ``X-Request-Id`` (vLLM serves it as ``cmpl-<id>-0-<suffix>``); the answer in ``/generate``'s
    shape: ``meta_info`` with the completion tokens (vLLM says nothing of verify steps)."""
    payload = {"prompt": input_ids, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
    out = _post(url, payload, timeout, {"X-Request-Id": rid}, "an OpenAI-compatible /v1/completions")
    usage = out.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    if not isinstance(out.get("choices"), list):
        raise GenerateError(f"{url}: the answer has no choices: not an OpenAI-compatible /v1/completions")
    return {"meta_info": {"completion_tokens": usage.get("completion_tokens"), "id": out.get("id")}}


def generate(url: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST ``payload`` to ``url`` (a ``/generate``); the answer, which carries ``meta_info``."""
    out = _post(url, payload, timeout, {}, "an SGLang-compatible /generate")
    if not isinstance(out.get("meta_info"), dict):
        raise GenerateError(f"{url}: the answer has no meta_info: not an SGLang-compatible /generate")
    return out


def _post(
    url: str, payload: dict[str, Any], timeout: float, headers: dict[str, str], what: str
) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    for k, v in headers.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=max(timeout, 0.1)) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()[:2000]
        if exc.code in (404, 405):
            raise GenerateError(f"{url}: HTTP {exc.code}: not {what}") from None
        detail = _error_message(body) or body.decode(errors="replace").strip()[:200]
        raise GenerateError(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise GenerateError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    try:
        out = json.loads(raw)
    except ValueError:
        raise GenerateError(f"{url}: the answer is not JSON: not {what}") from None
    if isinstance(out, list) and len(out) == 1:
        out = out[0]
    if not isinstance(out, dict):
        raise GenerateError(f"{url}: the answer is not a JSON object: not {what}")
    return out


def _error_message(body: bytes) -> Any:
    """The message of an error body in the shapes servers use ({error: {message}}, {detail}, ...)."""
    try:
        err = json.loads(body)
    except ValueError:
        return None
    if not isinstance(err, dict):
        return None
    e = err.get("error", err.get("detail", err.get("message")))
    return e.get("message") if isinstance(e, dict) else e
