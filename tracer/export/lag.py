"""How far behind the exporter's fold is, per source: the lag between a frame's arrival and the
moment it was folded into the book.

A frame that waits in the socket's queue (the receive thread busy, a batch gathering, a backlog
after a stall) is invisible to the receiver until it is read, so its arrival is estimated from the
publisher's own stamp: ``arrival ≈ ts + floor``, where ``floor`` is the least ``fold time - ts``
seen from that source lately (its clock's offset from ours plus the fastest way here). An event
folded at once has lag ~0 whatever the two clocks read; one that sat in a queue for 3 s has lag
~3 s. The floor is the minimum over the last one to two ``window_s``, so a publisher whose clock is
stepped back is misjudged for at most that long; a source whose very first frames already waited
is measured against them (its lag reads low until it once gets through quickly).

The floor learns only from folds that emptied the socket (``caught_up``): a delay seen while frames
still wait behind it includes the queue. Without that rule a fold that stays behind for two windows
(a receive queue always full) had its queueing taken for a clock offset, and the lag read ~0 while
the figures fell further behind.

Per batch the feed hands one stamp per source (its newest event's): nothing per event here.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

FLOOR_WINDOW_S = 60.0


class _SourceLag:
    __slots__ = ("floor", "floor_before", "window_at", "lag")

    def __init__(self, delay: float, now: float) -> None:
        self.floor = self.floor_before = delay  # this window's least delay, and the previous one's
        self.window_at = now
        self.lag = 0.0


class FoldLag:
    """Per source, the lag of its newest folded event. Not thread-safe: the feed's lock serialises
    the receive thread's ``fold`` and a scrape's ``lag``."""

    def __init__(self, window_s: float = FLOOR_WINDOW_S) -> None:
        self.window_s = window_s
        self._by: dict[str, _SourceLag] = {}

    def fold(self, newest: Mapping[str, float], now: float, caught_up: bool = True) -> None:
        """``newest``: per source, the publisher's ``ts`` of its newest event in a batch folded at
        ``now`` (the receiver's clock); ``caught_up``: the receive that ended the batch found the
        socket empty, so those newest events did not wait behind others."""
        by = self._by
        for key, ts in newest.items():
            delay = now - ts
            s = by.get(key)
            if s is None:
                by[key] = _SourceLag(delay, now)
                continue
            if caught_up:
                if now - s.window_at >= self.window_s:
                    s.floor_before, s.floor, s.window_at = s.floor, delay, now
                elif delay < s.floor:
                    s.floor = delay
            s.lag = max(0.0, delay - min(s.floor, s.floor_before))

    def lag(self, key: str) -> float:
        """Seconds the source's newest folded event waited before its fold (0 for one unknown)."""
        s = self._by.get(key)
        return s.lag if s is not None else 0.0

    def forget(self, keep: Container[str]) -> None:
        """Drop the sources not in ``keep`` (the book evicted them)."""
        for key in [k for k in self._by if k not in keep]:
            del self._by[key]

    def __len__(self) -> int:
        return len(self._by)
