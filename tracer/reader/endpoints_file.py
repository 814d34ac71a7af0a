"""An endpoints file: one endpoint (or port range) a line, ``#`` comments, blank lines ignored; each
bad line named with its line number, the rest used. ``EndpointsFile`` re-reads it when it changes
(mtime, size or inode: an editor's atomic rename counts) and says what was added and removed.

A file that vanishes, becomes unreadable or names no endpoint any more keeps the endpoints in use:
an editor that truncates before writing, or a deploy that replaces the file, must not leave a
monitor of a live fleet watching nothing."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eagle3_top.tracer.files import open_regular
from eagle3_top.tracer.schema import printable
from eagle3_top.tracer.transport.endpoints import endpoint_list

POLL_S = 1.0
MAX_BYTES = 1 << 20  # a fleet of thousands fits; a log named by mistake is not read whole

# A comment starts a line or follows a blank (an ipc:// path may hold a '#').
_COMMENT = re.compile(r"(^|\s)#.*$")


class EndpointsFileError(Exception):
    """The file cannot be read at all; the message is the one line to show."""


def parse_endpoints(text: str, name: str) -> tuple[list[str], list[str]]:
    """The endpoints of a file's text (ranges expanded, each once), and one line per bad line:
    ``NAME:7: 'foo': not an endpoint ...``."""
    endpoints: dict[str, None] = {}
    bad: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = _COMMENT.sub("", line).strip()
        if not entry:
            continue
        good, why = endpoint_list([entry])
        endpoints.update(dict.fromkeys(good))
        bad.extend(f"{printable(name, 200)}:{number}: {printable(w, 200)}" for w in why)
    return list(endpoints), bad


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Change:
    """What one re-read found: endpoints to connect and to disconnect, the bad lines of the file as
    it now stands, and ``problem`` when the file could not be used (the endpoints are kept)."""

    name: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    problem: str | None = None

    @property
    def fine(self) -> bool:
        """Nothing for the user to fix."""
        return self.problem is None and not self.bad

    def summary(self) -> str:
        """One line: ``endpoints file F: +2 −1, 1 bad line (F:7: 'foo': not an endpoint ...)``."""
        head = f"endpoints file {printable(self.name, 200)}: "
        if self.problem is not None:
            return head + self.problem
        parts = [f"+{len(self.added)} −{len(self.removed)}"] if self.added or self.removed else []
        if self.bad:
            parts.append(f"{plural(len(self.bad), 'bad line')} ({self.bad[0]})")
        return head + (", ".join(parts) or "no change")


def _signature(st: os.stat_result) -> tuple[int, ...]:
    # ctime too: a chmod that makes the file unreadable changes nothing else
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class EndpointsFile:
    """The endpoints a file names, re-read when it changes: ``load`` once, then ``poll`` as often as
    convenient (it looks at the file at most once every ``period_s``)."""

    def __init__(self, path: str, *, period_s: float = POLL_S, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.name = printable(path, 200)
        self.period_s = period_s
        self._clock = clock
        self.endpoints: list[str] = []
        self.bad: list[str] = []
        self._seen: tuple[int, ...] | None = None
        self._next = 0.0
        self._problem: str | None = None  # said once, until the file is usable again

    def _read(self) -> tuple[tuple[int, ...], str]:
        """The file's signature and text, or EndpointsFileError. The signature is taken before the
        read, so a write during the read is seen by the next poll."""
        try:
            with open_regular(self.path) as f:
                sig = _signature(os.fstat(f.fileno()))
                data = f.read(MAX_BYTES + 1)
        except OSError as exc:
            raise EndpointsFileError(f"{self.name}: {exc.strerror or exc}") from None
        if len(data) > MAX_BYTES:
            raise EndpointsFileError(f"{self.name}: larger than {MAX_BYTES >> 20} MiB; not an endpoints file")
        try:
            return sig, data.decode("utf-8-sig")  # a BOM from a Windows editor is no endpoint
        except UnicodeDecodeError as exc:
            raise EndpointsFileError(f"{self.name}: not UTF-8 text (byte {exc.start})") from None

    def load(self) -> list[str]:
        """The first reading: its endpoints (also kept in ``endpoints``; ``bad`` its bad lines).
        EndpointsFileError when the file cannot be read."""
        sig, text = self._read()
        self.endpoints, self.bad = parse_endpoints(text, self.path)
        self._seen = sig
        self._next = self._clock() + self.period_s
        return self.endpoints

    def poll(self) -> Change | None:
        """What changed since the last reading, or None when nothing did (or it is not yet time to
        look). A problem is reported once, and the endpoints are kept meanwhile."""
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + self.period_s
        try:
            if self._seen is not None and _signature(os.stat(self.path)) == self._seen:
                return None
            sig, text = self._read()
        except (OSError, EndpointsFileError) as exc:
            why = str(exc) if isinstance(exc, EndpointsFileError) else f"{self.name}: {exc.strerror or exc}"
            return self._fail(why.removeprefix(f"{self.name}: "))
        endpoints, bad = parse_endpoints(text, self.path)
        self._seen = sig
        if not endpoints and self.endpoints:
            return self._fail("names no endpoint now", bad)
        self._problem = None
        old, new = set(self.endpoints), set(endpoints)
        change = Change(
            self.path,
            added=[ep for ep in endpoints if ep not in old],
            removed=[ep for ep in self.endpoints if ep not in new],
            bad=bad,
        )
        self.endpoints, self.bad = endpoints, bad
        return change

    def _fail(self, why: str, bad: list[str] | None = None) -> Change | None:
        problem = f"{why}; keeping {plural(len(self.endpoints), 'endpoint')}"
        if problem == self._problem:
            return None
        self._problem = problem
        return Change(self.path, bad=bad or [], problem=problem)
