"""Play a recording back in recording time: a virtual clock with pause, step, seek and speed.

A consumer (the monitor's feed, ``check --replay``) calls ``take()`` for the frames now due and
folds them in at their own receive times, so what it builds is what the live monitor built. The
aggregates it folds into cannot be un-added: a seek back answers ``rewind=True`` with the frames
from the consumer's nearest checkpoint (``add_checkpoint``: a copy of its state it keeps, the
first frame by default) up to the target; the consumer restores that state and folds them in.

Threads: the controls (``toggle``, ``seek_*``, ``step_*``, ``set_speed``) come from the UI thread,
``take()`` from the consumer's worker; one lock covers the position and the clock.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from eagle3_top.tracer.reader.recording.reader import RecordedFrame, RecordingReader

# The speeds the +/- keys step through; None is "as fast as possible".
SPEEDS: tuple[float | None, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, None)
MIN_SPEED, MAX_SPEED = 0.25, 100.0


def speed_label(speed: float | None) -> str:
    return "max" if speed is None else f"{speed:g}x"


def parse_speed(text: str) -> float | None:
    """``2``, ``2x``, ``0.25`` or ``max``; raises ValueError outside 0.25-100."""
    t = text.strip().lower()
    if t in ("max", "fast"):
        return None
    try:
        value = float(t.removesuffix("x"))
    except ValueError:
        value = float("nan")
    if not MIN_SPEED <= value <= MAX_SPEED:
        raise ValueError(f"speed {text!r}: between {MIN_SPEED:g} and {MAX_SPEED:g}, or max")
    return value


@dataclass(frozen=True)
class Batch:
    frames: list[RecordedFrame]
    rewind: bool = False  # jumped: restore the state after frame ``start`` - 1, then fold these in
    start: int = 0  # the index of the first of ``frames`` in the recording
    revision: int = 0  # the timeline's revision when this batch was taken


@dataclass(frozen=True)
class Position:
    """Where the replay stands, for the scrubber."""

    start_ns: int
    end_ns: int
    now_ns: int
    delivered: int  # frames handed out so far
    total: int  # frames read from the file so far
    playing: bool
    speed: float | None
    at_end: bool  # every frame read so far has been handed out
    follow: bool
    damaged: int = 0  # problems the reader found in the file (``Timeline.damage()`` says which)
    revision: int = 0  # bumped by every change: frames handed out or read, a seek, play or pause

    @property
    def elapsed_s(self) -> float:
        return max(0, self.now_ns - self.start_ns) / 1e9

    @property
    def length_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def fraction(self) -> float:
        span = self.end_ns - self.start_ns
        if span <= 0:
            return 1.0 if self.at_end else 0.0
        return min(1.0, max(0.0, (self.now_ns - self.start_ns) / span))


class Timeline:
    """The frames of a recording on a virtual clock. ``follow`` keeps reading a file that grows."""

    def __init__(
        self,
        path: str,
        *,
        speed: float | None = 1.0,
        follow: bool = False,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.reader = RecordingReader(path)
        self.follow = follow
        self._wall = wall
        self._lock = threading.Lock()
        self.frames: list[RecordedFrame] = []
        self._times: list[int] = []  # log times made non-decreasing, for bisect
        self._damage: list[str] = []
        self._revision = 0
        self._read()  # a file that is no recording fails here, before any screen is drawn
        self._pos = 0
        self._now_ns = self._times[0] if self._times else 0
        self._last_wall = wall()
        self._playing = True
        self.speed = speed
        self._target: int | None = None  # a pending seek: deliver up to this frame index
        self._rewind = False
        # Positions at which the consumer keeps its state: a seek resumes from the nearest one at
        # or before its target instead of folding everything from the first frame again.
        self._checkpoints: list[int] = [0]

    # -- reading -----------------------------------------------------------------------------

    def _read(self) -> int:
        fresh = self.reader.read_available() if self.follow else list(self.reader)
        floor = self._times[-1] if self._times else 0
        for fr in fresh:
            # a wall clock stepped back mid-recording must not make the timeline go backwards
            floor = max(floor, fr.log_time_ns)
            self._times.append(floor)
        self.frames.extend(fresh)
        self._revision += bool(fresh)
        self._damage = self.reader.report.describe(unfinished=not self.follow)
        return len(fresh)

    def poll_file(self) -> int:
        """In follow mode, read what was appended since; the count of new frames."""
        if not self.follow:
            return 0
        with self._lock:
            n = self._read()
            if n and len(self.frames) == n:
                self._now_ns = self._times[0]
            return n

    def damage(self) -> list[str]:
        """What the reader could not read in the file, one line each (a followed file's tail that
        is still being written is not damage)."""
        with self._lock:
            return list(self._damage)

    # -- the consumer's side -----------------------------------------------------------------

    def take(self, max_frames: int = 4096) -> Batch:
        """The frames due now (at most ``max_frames``), advancing the clock if playing."""
        with self._lock:
            wall = self._wall()
            elapsed, self._last_wall = wall - self._last_wall, wall
            rewind, self._rewind = self._rewind, False
            if self._target is not None:
                end = min(self._target, self._pos + max_frames)
                if end >= self._target:
                    self._target = None
            elif not self._playing or self._pos >= len(self.frames) and not self.follow:
                return Batch([], rewind, self._pos, self._revision)
            elif self.speed is None:
                end = min(len(self.frames), self._pos + max_frames)
            else:
                self._now_ns += int(elapsed * self.speed * 1e9)
                end = min(bisect.bisect_right(self._times, self._now_ns), self._pos + max_frames)
                if end == len(self.frames) and self._times:
                    # the end holds still; followed, it waits there for what the recorder appends
                    self._now_ns = min(self._now_ns, self._times[-1])
            start = self._pos
            out = self.frames[start:end]
            if end > start and (self.speed is None or self._target is not None or not self._playing):
                self._now_ns = max(self._now_ns, self._times[end - 1])
            self._pos = max(start, end)
            self._revision += bool(out)
            return Batch(out, rewind, start, self._revision)

    def now(self) -> float:
        """The virtual clock, in seconds since the Unix epoch (the recording's receive times)."""
        with self._lock:
            return self._now_ns / 1e9

    def position(self) -> Position:
        with self._lock:
            return Position(
                start_ns=self._times[0] if self._times else 0,
                end_ns=self._times[-1] if self._times else 0,
                now_ns=self._now_ns,
                delivered=self._pos,
                total=len(self.frames),
                playing=self._playing,
                speed=self.speed,
                at_end=self._pos >= len(self.frames) and self._target is None,
                follow=self.follow,
                damaged=len(self._damage),
                revision=self._revision,
            )

    # -- controls (the UI thread) ------------------------------------------------------------

    def toggle(self) -> bool:
        """Pause or play; True when playing now. Play at the end of a finished recording starts it
        again from the beginning, as a media player does."""
        with self._lock:
            if not self._playing and self.frames and not self.follow and self._pos >= len(self.frames):
                self._go(0)
            self._playing = not self._playing
            self._revision += 1
            self._last_wall = self._wall()
            return self._playing

    def set_speed(self, speed: float | None) -> None:
        with self._lock:
            self.speed = speed
            self._last_wall = self._wall()

    def faster(self, steps: int = 1) -> float | None:
        i = SPEEDS.index(self.speed) if self.speed in SPEEDS else 2
        self.set_speed(SPEEDS[max(0, min(len(SPEEDS) - 1, i + steps))])
        return self.speed

    def add_checkpoint(self, position: int) -> None:
        """The consumer holds its state as it stood after the first ``position`` frames."""
        with self._lock:
            if position > self._checkpoints[-1]:
                self._checkpoints.append(position)

    def drop_checkpoints(self, keep: list[int]) -> None:
        """The consumer let go of every checkpoint but ``keep`` (0 always stays)."""
        with self._lock:
            self._checkpoints = sorted({0, *keep})

    def restart_from(self, position: int, upto: int) -> None:
        """The consumer could not resume where the last batch began (it let go of that checkpoint
        meanwhile): hand out the frames from ``position`` again, through ``upto`` at least."""
        with self._lock:
            self._pos, self._rewind = position, True
            self._revision += 1
            if upto > position:
                self._target = max(self._target or 0, upto)

    def _go(self, index: int, now_ns: int | None = None) -> None:
        """Move to just after frame ``index - 1`` (the caller holds the lock); pauses. Back, or far
        ahead, the consumer resumes from its nearest checkpoint at or before ``index``."""
        index = max(0, min(len(self.frames), index))
        self._playing = False
        self._revision += 1
        nearest = self._checkpoints[bisect.bisect_right(self._checkpoints, index) - 1]
        if index < self._pos or nearest > self._pos:
            self._rewind, self._pos = True, nearest
        self._target = index if index > self._pos else None
        if now_ns is not None:
            self._now_ns = now_ns
        elif index > 0:
            self._now_ns = self._times[index - 1]
        elif self._times:
            self._now_ns = self._times[0]

    def seek_time(self, seconds: float) -> None:
        """To ``seconds`` after the first frame (clamped to the recording)."""
        with self._lock:
            if not self._times:
                return
            ns = self._times[0] + int(max(0.0, seconds) * 1e9)
            ns = min(ns, self._times[-1])
            self._go(bisect.bisect_right(self._times, ns), ns)

    def seek_fraction(self, fraction: float) -> None:
        with self._lock:
            if not self._times:
                return
            span = self._times[-1] - self._times[0]
            ns = self._times[0] + int(span * min(1.0, max(0.0, fraction)))
            self._go(bisect.bisect_right(self._times, ns), ns)

    def step_events(self, n: int) -> None:
        """Forward (n > 0) or back one or more frames."""
        with self._lock:
            self._go(self._pos + n)

    def step_seconds(self, seconds: float) -> None:
        with self._lock:
            if not self._times:
                return
            ns = min(max(self._now_ns + int(seconds * 1e9), self._times[0]), self._times[-1])
            self._go(bisect.bisect_right(self._times, ns), ns)


def parse_seek(text: str) -> tuple[str, float]:
    """``90``, ``90s``, ``1:30``, ``1:02:03`` (from the start) or ``45%``: ("time", seconds) or
    ("fraction", 0..1); ValueError with a one-line reason otherwise."""
    t = text.strip().lower()
    try:
        if t.endswith("%"):
            pct = float(t[:-1])
            if not 0 <= pct <= 100:
                raise ValueError
            return "fraction", pct / 100
        parts = [float(p) for p in t.removesuffix("s").split(":")]
        if not 1 <= len(parts) <= 3 or any(p < 0 or p != p for p in parts):
            raise ValueError
    except ValueError:
        raise ValueError(f"{text!r}: a time (90, 90s, 1:30, 1:02:03) or a percentage (45%)") from None
    seconds = 0.0
    for p in parts:
        seconds = seconds * 60 + p
    return "time", seconds
