"""Tolerant reading of the records the protocol lets be odd (hello, health): a key that is absent,
or whose value has another type than its field, reads as the field's default. One reader for every
flat record, driven by its dataclass fields, so that no record spells its keys twice."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from eagle3_top.tracer.schema.shared import Shared
from eagle3_top.tracer.schema.text import printable

T = TypeVar("T")
R = TypeVar("R", bound="Record")

_MISSING = object()


def as_int(v: Any) -> int | None:
    return v if type(v) is int else None


def as_str(v: Any) -> str | None:
    """A wire string made safe to show (``text.printable``), or None for anything else."""
    return printable(v) if isinstance(v, str) else None


def as_map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


MAX_LIST = 1024  # no list of layer ids or slots is longer; a longer one reads as absent


def _id_list(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= MAX_LIST and all(type(x) is int for x in v)


# field annotation -> does a wire value fit it
_FITS: dict[str, Callable[[Any], bool]] = {
    "int | None": lambda v: type(v) is int,
    "float | None": lambda v: type(v) is float and math.isfinite(v),
    "str | None": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "list[int] | None": _id_list,
    "list[float] | None": lambda v: (
        isinstance(v, list)
        and len(v) <= MAX_LIST
        and all(type(x) in (int, float) and math.isfinite(x) for x in v)
    ),
    "Mapping[str, Any] | None": lambda v: isinstance(v, Mapping),
    "int | str | None": lambda v: type(v) is int or isinstance(v, str),
}


def _kept(val: Any) -> Any:
    """A fitting wire value as the record keeps it: strings made safe to show, lists copied."""
    if isinstance(val, str):
        return printable(val)
    return list(val) if isinstance(val, list) else val


_PLANS: dict[type, tuple[tuple[str, Callable[[Any], bool], Any], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, Callable[[Any], bool], Any], ...]:
    if cls in _PLANS:
        return _PLANS[cls]
    plan = []
    for f in dataclasses.fields(cls):
        if f.type not in _FITS:
            raise TypeError(f"{cls.__name__}.{f.name}: no tolerant reader for {f.type}")
        plan.append((f.name, _FITS[str(f.type)], f.default))
    _PLANS[cls] = tuple(plan)
    return _PLANS[cls]


def read_record(cls: type[T], v: Any, *, rename: Mapping[str, str] | None = None) -> T:
    """An instance of the flat frozen dataclass ``cls`` from the wire map ``v`` (anything else reads
    as an empty map). ``rename``: field name -> wire key where they differ."""
    m = as_map(v)
    kwargs = {}
    for name, fits, default in _plan(cls):
        val = m.get(rename.get(name, name) if rename else name, _MISSING)
        kwargs[name] = _kept(val) if fits(val) else default
    return cls(**kwargs)


def record_body(rec: Any, *, rename: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The wire map of a flat record (lists and maps copied)."""
    out = {}
    for f in dataclasses.fields(rec):
        val = getattr(rec, f.name)
        if isinstance(val, Mapping):
            val = dict(val)
        elif isinstance(val, list):
            val = list(val)
        out[rename.get(f.name, f.name) if rename else f.name] = val
    return out


class Record(Shared):
    """Base of the flat frozen dataclasses read tolerantly. ``WIRE``: field name -> wire key, where
    they differ."""

    WIRE: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def from_body(cls: type[R], v: Any) -> R:
        return read_record(cls, v, rename=cls.WIRE)

    def to_body(self) -> dict[str, Any]:
        return record_body(self, rename=self.WIRE)
