"""The sidecar: reads the serving process's ring and publishes its events on the XPUB socket.

Started by ``RingPublisher`` (``python -m eagle3_top.tracer.serving.sidecar``), never by hand. It
owns everything the in-process sender did: the socket, sequence numbers, hello on subscription and
every 5 s, health every second (the serving process's counters read from the ring's header), and
turns each step record into the wire's step body with the same code. It ends when the serving
process closes the tracer, or when that process is gone however it went (its pipe reaches EOF, or
this process is re-parented): it publishes what is left in the ring, then a final health event.
Ctrl-C at the server's terminal reaches the whole process group; the sidecar ignores it and ends
with its server instead, so nothing written is lost.

Its first line on stdout answers the serving process: ``ready ENDPOINT``, ``bind WHY`` (the
endpoint cannot be bound) or ``error WHY``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import select
import signal
import sys
import threading
from typing import Any

import msgpack
from eagle3_top.tracer.schema import STEP, Health, SourceId
from eagle3_top.tracer.serving.publisher import EndpointError, Publisher
from eagle3_top.tracer.serving.ring import (
    CLOSE_RECORD,
    EVENT_RECORD,
    HELLO_RECORD,
    STATE_RECORD,
    STEP_RECORD,
    Ring,
    RingError,
)
from eagle3_top.tracer.serving.step_record import RecordError, step_from_record

log = logging.getLogger("eagle3_top.sidecar")

FLUSH_INTERVAL_S = 0.02  # its own process: waking often costs the server nothing
IDLE_MAX_S = 0.02  # the longest nap between looks at an empty ring


class MirrorPublisher(Publisher):
    """A ``Publisher`` whose health events carry the serving process's counters from the ring."""

    def __init__(self, ring: Ring, *args: Any, **kwargs: Any) -> None:
        self.ring = ring
        super().__init__(*args, **kwargs)

    def health(self) -> Health:
        st = self.ring.state()
        self.hook_errors, self.discarded_rows = st["hook_errors"], st["discarded_rows"]
        self.paused = st["paused"]
        if st["disabled"]:  # the tracer switched itself off (it never switches back on)
            self.disabled = True
        if st["started"]:
            self.started = st["started"]
        h = super().health()
        return dataclasses.replace(h, dropped=self.dropped + self.ring.dropped)


class Sidecar:
    def __init__(self, ring: Ring, pub: MirrorPublisher) -> None:
        self.ring, self.pub = ring, pub
        self.closed = False
        self.bad = 0

    def handle(self, kind: int, lost: int, payload: bytes) -> None:
        pub = self.pub
        if lost:
            pub.skip(lost)
        try:
            if kind == STEP_RECORD:
                ts, body = step_from_record(payload)
                pub.publish(STEP, body, ts)
            elif kind == EVENT_RECORD:
                ekind, ts, fields = msgpack.unpackb(payload)
                pub.publish(ekind, fields, ts)
            elif kind == HELLO_RECORD:
                pub.set_hello_body(msgpack.unpackb(payload))
            elif kind == STATE_RECORD:
                st = msgpack.unpackb(payload)
                pub.last_error, pub.engine_error = st["last_error"], st["engine_error"]
                if st["now"]:
                    pub.wake()
                    pub.flush(1.0)
                self.ring.ack_state(int(st["n"]))
            elif kind == CLOSE_RECORD:
                self.closed = True
        except (RecordError, ValueError, KeyError, TypeError) as exc:
            # a record of ours that does not read back: one event lost, named, never the stream
            self.bad += 1
            pub.encode_errors += 1
            pub.last_error = f"ring record {kind}: {type(exc).__name__}: {exc}"[:300]

    def drain(self) -> int:
        n = 0
        while True:
            records = self.ring.take()
            for rec in records:
                self.handle(*rec)
            n += len(records)
            if not records:
                return n


def _parent_gone(life_fd: int, ppid: int, nap: float) -> bool:
    """Nap up to ``nap`` seconds; True once the serving process is gone."""
    ready, _, _ = select.select([life_fd], [], [], nap)
    if ready and os.read(life_fd, 1) == b"":
        return True
    return os.getppid() != ppid


def run(ring: Ring, pub: MirrorPublisher, life_fd: int, stop: threading.Event) -> str:
    """Publish until the serving process closes the tracer or is gone; returns why it ended."""
    side = Sidecar(ring, pub)
    ppid = os.getppid()
    nap = 0.001
    why = "closed"
    while True:
        try:
            got = side.drain()
        except RingError as exc:
            pub.disabled = True
            pub.last_error = str(exc)[:300]
            log.error("eagle3-top sidecar: %s; publishing stops", exc)
            why = "ring"
            break
        if side.closed:
            break
        if stop.is_set():
            why = "terminated"
            break
        nap = 0.001 if got else min(nap * 2, IDLE_MAX_S)
        if _parent_gone(life_fd, ppid, nap):
            why = "parent gone"
            break
    if why != "ring":
        try:
            side.drain()  # what the serving process wrote before it went
        except RingError:
            pass
    pub.close(2.0)
    return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="eagle3-top-sidecar")
    ap.add_argument("--ring-fd", type=int, required=True)
    ap.add_argument("--life-fd", type=int, required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--source", required=True, help="msgpack [host, pid, rank, engine], hex")
    ap.add_argument("--hello-interval", type=float, default=5.0)
    ap.add_argument("--health-interval", type=float, default=1.0)
    ap.add_argument("--allow-remote", action="store_true")
    ns = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # the server's terminal sends Ctrl-C to its whole group: end with the server, not before it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def answer(line: str) -> None:
        sys.stdout.write(line.replace("\n", " ") + "\n")
        sys.stdout.flush()

    try:
        host, pid, rank, engine = msgpack.unpackb(bytes.fromhex(ns.source))
        source = SourceId(str(host), int(pid), int(rank), str(engine))
        secret = msgpack.unpackb(sys.stdin.buffer.read())
        curve = None
        if secret is not None:
            from eagle3_top.tracer.transport.curve import CurveServer

            curve = CurveServer(secret[0], None if secret[1] is None else frozenset(secret[1]), secret[2])
        ring = Ring.attach(ns.ring_fd)
    except Exception as exc:
        answer(f"error {type(exc).__name__}: {exc}")
        return 2
    try:
        pub = MirrorPublisher(
            ring,
            ns.endpoint,
            source,
            allow_remote=ns.allow_remote,
            curve=curve,
            hello_interval_s=ns.hello_interval,
            health_interval_s=ns.health_interval,
            flush_interval_s=FLUSH_INTERVAL_S,
        )
    except (EndpointError, OSError, ValueError) as exc:
        answer(f"bind cannot bind {ns.endpoint}: {exc}")
        return 2
    except Exception as exc:  # zmq.ZMQError (address in use) and anything else
        answer(f"bind cannot bind {ns.endpoint}: {type(exc).__name__}: {exc}")
        return 2
    answer(f"ready {pub.bound_endpoint}")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nobody reads our stdout after the answer: a full pipe must not block us
    os.close(devnull)
    why = run(ring, pub, ns.life_fd, stop)
    return 0 if why in ("closed", "parent gone", "terminated") else 1


if __name__ == "__main__":
    sys.exit(main())
