"""ZeroMQ CURVE for remote tailing: encrypted, and both ends authenticated.

Keys are ZeroMQ certificate files (``zmq.auth.create_certificates``): ``NAME.key`` holds the
public key, ``NAME.key_secret`` both. The publisher (a CURVE server) admits only clients whose
public certificate sits in its authorised directory, checked by a ZAP handler thread.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth

_auth_lock = threading.Lock()
_authenticators: dict[int, Any] = {}  # id(context) -> zmq.auth.thread.ThreadAuthenticator


@dataclass
class CurveClient:
    """Keys for an authenticated, encrypted connection (ZeroMQ CURVE)."""

    server_public: bytes
    public: bytes
    secret: bytes


class KeyError_(ValueError):
    """A key file that is missing or not a ZeroMQ certificate; one line."""


def generate(directory: str, name: str) -> tuple[str, str]:
    """Write ``NAME.key`` and ``NAME.key_secret`` in ``directory``; returns both paths."""
    os.makedirs(directory, exist_ok=True)
    public, secret = zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    return str(public), str(secret)


def load_public(path: str) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyError_(f"{path}: not a ZeroMQ certificate: {exc}") from None
    return public


def load_secret(path: str) -> tuple[bytes, bytes]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyError_(f"{path}: not a ZeroMQ certificate: {exc}") from None
    if secret is None:
        raise KeyError_(f"{path}: holds no secret key (use the .key_secret file)")
    return public, secret


def client(server_public_file: str, client_secret_file: str) -> CurveClient:
    public, secret = load_secret(client_secret_file)
    return CurveClient(server_public=load_public(server_public_file), public=public, secret=secret)


def authorise_clients(context: zmq.Context, directory: str) -> None:
    """Start (once per context) a ZAP handler admitting the client certificates in ``directory``."""
    if not os.path.isdir(directory):
        raise KeyError_(f"{directory}: no such directory of client certificates")
    from zmq.auth.thread import ThreadAuthenticator

    with _auth_lock:
        auth = _authenticators.get(id(context))
        if auth is None:
            auth = ThreadAuthenticator(context)
            auth.start()
            _authenticators[id(context)] = auth
        auth.configure_curve(domain="*", location=directory)
