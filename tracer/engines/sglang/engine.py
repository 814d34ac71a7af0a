"""SGLang as an :class:`~eagle3_top.tracer.engines.base.Engine`: where it reads the ids (``ids``), how
it captures (``capture``), how it rewrites the flags (``flags``), the releases it knows
(``versions``) and what each of them was seen to do wrong (``defects``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eagle3_top.tracer.engines.base import Capture, IdsAsRead, KnownDefect, Outcome, SpecArgs, Version

from . import capture, defects, flags, ids, versions


class SGLang:
    name = "sglang"
    title = "SGLang"
    supported: tuple[Version, Version] | None = versions.SUPPORTED
    ids_key = ids.IDS_KEY
    ids_where = "in the draft's config.json"
    observer: str | None = "eagle3_top.hooks.sglang.observe"

    def read_ids(self, draft_config: Mapping[str, Any]) -> IdsAsRead:
        return ids.read_ids(draft_config)

    def family(self, arch: str | None, model: Any = None) -> str:
        return capture.family_of(model, arch)

    def convention(self, family: str) -> str:
        return capture.CONVENTIONS.get(family, capture.CONVENTIONS[capture.LLAMA])

    def default_native(self, family: str, num_layers: int) -> list[int]:
        return capture.default_native(num_layers)

    def native_from_ids(self, family: str, ids: Sequence[int] | None, num_layers: int) -> list[int]:
        return capture.native_from_ids(family, ids, num_layers)

    def capture(self, family: str, native: Sequence[int], num_layers: int) -> Capture:
        got = capture.captured_native(family, native, num_layers)
        return Capture(got, [i - 1 for i in got], capture.capture_failure(family, native, num_layers))

    def resolve_flags(self, requested: SpecArgs, arch: str | None) -> tuple[SpecArgs, list[dict[str, Any]]]:
        return flags.resolve_spec_args(requested, arch)

    def known_defects(
        self, version: str | None, arch: str | None, ids: Sequence[int] | None, num_layers: int | None
    ) -> list[KnownDefect]:
        return defects.known_defects(version, arch, ids, num_layers)

    def defects_coverage(self, version: str | None, arch: str | None) -> str | None:
        return defects.coverage(version, arch)

    def observed_outcome(self, row: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> Outcome:
        return defects.outcome(row, baseline)


ENGINE = SGLang()
