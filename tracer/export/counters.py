"""Counters that never go down, for ``eagle3-top export``: what a source's tallies read now, plus
what earlier lives of the same series had counted.

A tally starts over when what holds it is new: the book forgot a source and met it again, the
ledger made new sequence counters, a restarted tracer reports its own counters from zero. Each
group of tallies comes with an *epoch*: the object that holds them (compared by identity, through
a weak reference) or a value (a publisher's start time). When the epoch changes, the figures of
the old one become the series' offset. Within an epoch a fall is either held (a reordered frame
filling a hole in seq: the count was right before) or taken for a restart (a tracer's own counter
falling back: Prometheus's own rule). One numpy vector per group, so a scrape does no per-value
Python work.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import numpy as np

MAX_SERIES_GROUPS = 4096  # forgotten, oldest first, past this: a source gone for good costs nothing


class _Epoch:
    """An epoch marker: an object by weak identity (no id() reuse after it dies), else a value."""

    __slots__ = ("_ref", "_value")

    def __init__(self, marker: object) -> None:
        try:
            self._ref: weakref.ref[object] | None = weakref.ref(marker)
            self._value: object = None
        except TypeError:  # a float, None, ...
            self._ref, self._value = None, marker

    def same(self, marker: object) -> bool:
        if self._ref is not None:
            return self._ref() is marker
        return bool(self._value == marker)


class _Track:
    __slots__ = ("epoch", "last", "offset")

    def __init__(self, epoch: _Epoch, last: np.ndarray) -> None:
        self.epoch, self.last = epoch, last
        self.offset = np.zeros_like(last)


class RestartSafe:
    """Per named group of tallies (a source's book figures, its tracer's health counters, ...), the
    exported values: offset of earlier epochs + this epoch's. Not thread-safe: the collector calls
    it one scrape at a time, with the copies in the order they were taken."""

    def __init__(self, max_groups: int = MAX_SERIES_GROUPS) -> None:
        self._tracks: OrderedDict[tuple[str, str], _Track] = OrderedDict()
        self._max = max_groups

    def values(
        self, group: tuple[str, str], raw: np.ndarray, epoch: object, *, fall_is_restart: bool
    ) -> np.ndarray:
        """``raw``: the tallies as their holder reads them now (int64, a fixed layout per group)."""
        t = self._tracks.get(group)
        if t is None or t.last.shape != raw.shape:
            t = self._tracks[group] = _Track(_Epoch(epoch), raw.copy())
            self._trim()
            return raw.copy()
        self._tracks.move_to_end(group)
        if not t.epoch.same(epoch) or (fall_is_restart and bool(np.any(raw < t.last))):
            t.offset += t.last
            t.epoch, t.last = _Epoch(epoch), raw.copy()
        else:
            np.maximum(t.last, raw, out=t.last)
        return t.offset + t.last

    def __len__(self) -> int:
        return len(self._tracks)

    def _trim(self) -> None:
        while len(self._tracks) > self._max:
            self._tracks.popitem(last=False)
