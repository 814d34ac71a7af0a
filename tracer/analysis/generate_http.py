"""The one HTTP call the analysis makes: SGLang's ``/generate`` with ``input_ids`` (stdlib only)."""

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


def generate(url: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST ``payload`` to ``url`` (a ``/generate``); the answer, which carries ``meta_info``."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=max(timeout, 0.1)) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()[:2000]
        if exc.code in (404, 405):
            raise GenerateError(
                f"{url}: HTTP {exc.code}: not an SGLang-compatible server (no /generate)"
            ) from None
        detail = _error_message(body) or body.decode(errors="replace").strip()[:200]
        raise GenerateError(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise GenerateError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    try:
        out = json.loads(raw)
    except ValueError:
        raise GenerateError(f"{url}: the answer is not JSON: not an SGLang-compatible server") from None
    if isinstance(out, list) and len(out) == 1:
        out = out[0]
    if not isinstance(out, dict) or not isinstance(out.get("meta_info"), dict):
        raise GenerateError(f"{url}: the answer has no meta_info: not an SGLang-compatible /generate")
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
