"""ZeroMQ CURVE for remote tailing: encrypted, and both ends authenticated.

Keys are ZeroMQ certificate files (``zmq.auth.create_certificates``): ``NAME.key`` holds the
public key, ``NAME.key_secret`` both. The publisher (a CURVE server) admits only clients whose
public certificate sits in its authorised directory, checked by a ZAP handler thread; admitting
any client that knows the server's public key takes an explicit switch (``server_config``).
"""

from __future__ import annotations

import glob
import itertools
import logging
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth
from eagle3_top.tracer.files import open_regular
from zmq.utils import z85

log = logging.getLogger("eagle3_top.publisher")

_auth_lock = threading.Lock()
# A context that is gone must not hand its dead authenticator to a new one at the same address:
# without a ZAP handler libzmq lets every CURVE client in.
_authenticators: weakref.WeakKeyDictionary[zmq.Context, Any] = weakref.WeakKeyDictionary()
_domains = itertools.count()
_Z85 = frozenset(z85.Z85CHARS)


@dataclass
class CurveClient:
    """Keys for an authenticated, encrypted connection (ZeroMQ CURVE)."""

    server_public: bytes
    public: bytes
    secret: bytes


@dataclass(frozen=True)
class CurveServer:
    """A publisher's side of CURVE, validated by ``server_config``."""

    secret: bytes
    admitted: frozenset[bytes] | None  # z85 public keys; None: any client (asked for explicitly)
    clients_dir: str | None = None


@dataclass(frozen=True)
class ServerNames:
    """How the three server settings are spelled where they came from, for the error messages."""

    secret: str
    clients: str
    any_client: str


FLAGS = ServerNames("--curve-secret", "--curve-clients", "--curve-any-client")


class KeyError_(ValueError):
    """A key file that is missing or not a ZeroMQ certificate; one line."""


def generate(directory: str, name: str) -> tuple[str, str]:
    """Write ``NAME.key`` and ``NAME.key_secret`` in ``directory``; returns both paths."""
    os.makedirs(directory, exist_ok=True)
    public, secret = zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    return str(public), str(secret)


MAX_CERTIFICATE_BYTES = 64 << 10  # a certificate is a few hundred bytes


def _certificate(path: str) -> tuple[bytes, bytes | None]:
    try:  # a regular file of a certificate's size: /dev/zero would be read until memory runs out
        open_regular(path, MAX_CERTIFICATE_BYTES).close()
    except OSError as exc:
        raise KeyError_(f"{path}: {exc.strerror or exc}") from None
    try:
        public, secret = zmq.auth.load_certificate(path)
        # a mangled key would otherwise surface later as a bare EINVAL from setsockopt
        for key in (public, secret):
            if key is not None and (len(key) != 40 or not set(key) <= _Z85):
                raise ValueError("a key is not 40 z85 characters")
    except (OSError, ValueError) as exc:
        raise KeyError_(f"{path}: not a ZeroMQ certificate: {exc}") from None
    return public, secret


def load_public(path: str) -> bytes:
    return _certificate(path)[0]


def load_secret(path: str) -> tuple[bytes, bytes]:
    public, secret = _certificate(path)
    if secret is None:
        raise KeyError_(f"{path}: holds no secret key (use the .key_secret file)")
    return public, secret


def client(server_public_file: str, client_secret_file: str) -> CurveClient:
    public, secret = load_secret(client_secret_file)
    return CurveClient(server_public=load_public(server_public_file), public=public, secret=secret)


def server_config(
    secret_file: str | None,
    clients_dir: str | None,
    any_client: bool = False,
    names: ServerNames = FLAGS,
) -> CurveServer | None:
    """The publisher's CURVE settings, or None when none is given (plain text, loopback or tunnel).

    Raises ``KeyError_`` (one line) on a half configuration: each would otherwise serve plain text,
    admit anyone without having been asked to, or admit nobody.
    """
    if not secret_file:
        if clients_dir:
            raise KeyError_(
                f"{names.clients} needs {names.secret}: without it the stream would be plain text"
            )
        if any_client:
            raise KeyError_(
                f"{names.any_client} needs {names.secret}: without it the stream would be plain text"
            )
        return None
    if clients_dir and any_client:
        raise KeyError_(
            f"{names.any_client} contradicts {names.clients}: admit the certificates in {clients_dir} "
            "or any client, not both"
        )
    if not clients_dir and not any_client:
        raise KeyError_(
            f"{names.secret} needs {names.clients} (the directory of client certificates to admit), "
            f"or {names.any_client} to admit any client that knows the server's public key"
        )
    _, secret = load_secret(secret_file)
    if not clients_dir:
        return CurveServer(secret=secret, admitted=None)
    if not os.path.isdir(clients_dir):
        raise KeyError_(f"{names.clients} {clients_dir}: no such directory of client certificates")
    files = sorted(glob.glob(os.path.join(glob.escape(clients_dir), "*.key")))
    if not files:
        raise KeyError_(
            f"{names.clients} {clients_dir}: no client certificate (*.key) in it: nobody could subscribe"
        )
    return CurveServer(
        secret=secret, admitted=frozenset(load_public(f) for f in files), clients_dir=clients_dir
    )


# libzmq's verdicts on handshakes that never reach ZAP, as the server's monitor reports them
_KEYLESS: dict[int, str] = {
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "it does not use CURVE (plain text)",
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "its handshake does not decrypt (another server public key?)",
}


class Admission:
    """One publisher's ZAP verdicts (a pyzmq credentials provider), with a log of the refused.

    Each refused client is logged once, by its z85 public key, or by the reason when the handshake
    failed before any key was readable. Clients that retry, or a scan, would otherwise fill the
    server's log: at most ``max_logged`` of them are remembered, the rest only counted.
    """

    def __init__(self, config: CurveServer, label: str, max_logged: int = 64) -> None:
        self.config = config
        self.label = label  # the endpoint, in the log lines
        self.domain = f"eagle3-top.{next(_domains)}"
        self.max_logged = max_logged
        self.refused = 0  # refused handshakes, retries included
        self.refused_clients = 0  # distinct keys (or keyless reasons) among those logged
        self.unlogged = 0  # refusals of clients past max_logged, counted only
        self._logged: set[bytes | str] = set()
        self._lock = threading.Lock()

    def callback(self, domain: str, key: bytes) -> bool:
        """Called by pyzmq's authenticator thread with the client's z85 public key."""
        # A raise would end the authenticator thread, and with it every publisher's handshakes.
        try:
            admitted = self.config.admitted
            if admitted is None or key in admitted:
                return True
            self.refuse(key, f"its public key is not among the certificates in {self.config.clients_dir}")
        except Exception:
            return False
        return False

    def refuse_protocol(self, error: int) -> None:
        """A handshake the server's monitor saw fail (``EVENT_HANDSHAKE_FAILED_PROTOCOL``)."""
        why = _KEYLESS.get(error, f"protocol error {error:#x}")
        self.refuse(why, why)

    def refuse(self, who: bytes | str, why: str) -> None:
        with self._lock:
            self.refused += 1
            if who in self._logged:
                return
            if len(self._logged) >= self.max_logged:
                self.unlogged += 1
                if self.unlogged == 1:
                    log.warning(
                        "eagle3-top publisher %s: %d refused clients logged; further ones are counted, not logged",
                        self.label,
                        self.max_logged,
                    )
                return
            self._logged.add(who)
            self.refused_clients += 1
        if isinstance(who, bytes):
            log.warning(
                "eagle3-top publisher %s: refused CURVE client %s: %s (logged once per key)",
                self.label,
                who.decode("ascii", "replace"),
                why,
            )
        else:
            log.warning("eagle3-top publisher %s: refused a client: %s (logged once)", self.label, why)


def serve(context: zmq.Context, sock: zmq.Socket, config: CurveServer, label: str) -> Admission:
    """Make ``sock`` (before it binds) a CURVE server whose clients this context's ZAP handler judges.

    Every CURVE socket gets a ZAP domain of its own, so publishers sharing a context keep their
    own admitted keys, and a socket whose domain is unknown is refused rather than let in.
    """
    from zmq.auth.thread import ThreadAuthenticator

    admission = Admission(config, label)
    with _auth_lock:
        auth = _authenticators.get(context)
        if auth is None or not auth.is_alive():
            auth = ThreadAuthenticator(context)
            auth.start()  # binds inproc://zeromq.zap.01; raises if another handler holds it
            _authenticators[context] = auth
        auth.configure_curve_callback(domain=admission.domain, credentials_provider=admission)
    sock.zap_domain = admission.domain.encode()
    sock.curve_server = True
    sock.curve_secretkey = config.secret
    return admission


def drain_refusals(monitor: zmq.Socket, admission: Admission) -> None:
    """Log the handshakes a CURVE server's monitor (``EVENT_HANDSHAKE_FAILED_PROTOCOL``) saw fail:
    plain-text clients and wrong server keys fail before ZAP, and only the monitor tells."""
    from zmq.utils.monitor import recv_monitor_message

    while monitor.poll(0):
        msg = recv_monitor_message(monitor, zmq.NOBLOCK)
        if msg["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            admission.refuse_protocol(msg["value"])


def release(context: zmq.Context, admission: Admission) -> None:
    """Forget a closed publisher's domain (its socket is gone; nothing can ask for it)."""
    with _auth_lock:
        auth = _authenticators.get(context)
        if auth is not None:
            auth.credentials_providers.pop(admission.domain, None)
