"""Values read off the wire are never changed once decoded: a copy shares them."""

from __future__ import annotations

from typing import Any


class Shared:
    """Copied by reference: a copy of a book (a replay checkpoint) shares the events and records
    it holds instead of copying what a publisher sent, so nothing in a frame decides what a
    checkpoint costs or whether it can be made."""

    __slots__ = ()

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self
