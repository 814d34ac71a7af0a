"""vLLM as an :class:`~eagle3_top.tracer.engines.base.Engine`: where it reads the ids (``ids``),
how it captures (``capture``), its speculative config (``flags``) and the releases it knows
(``versions``). No release defect table yet: vLLM's behaviour on a capture case follows from its
rules (``capture.capture_failure``), and what the rules do not say is reported as unobserved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eagle3_top.tracer.engines.base import (
    Capture,
    IdsAsRead,
    KnownDefect,
    Outcome,
    SpecArgs,
    Version,
    outcome_of,
    version_text,
)

from . import capture, flags, ids, versions


class VLLM:
    name = "vllm"
    title = "vLLM"
    supported: tuple[Version, Version] | None = versions.SUPPORTED
    ids_key = ids.KEY
    ids_where = (
        "at the top level of the draft's config.json (vLLM reads it there before eagle_config; "
        "SGLang never reads it there)"
    )
    observer: str | None = None

    def read_ids(self, draft_config: Mapping[str, Any]) -> IdsAsRead:
        return ids.read_ids(draft_config)

    def family(self, arch: str | None, model: Any = None) -> str:
        return capture.family_of(model, arch)

    def convention(self, family: str) -> str:
        return capture.CONVENTION

    def default_native(self, family: str, num_layers: int) -> list[int]:
        return capture.default_native(num_layers)

    def native_from_ids(self, family: str, ids: Sequence[int] | None, num_layers: int) -> list[int]:
        return capture.native_from_ids(ids, num_layers)

    def capture(self, family: str, native: Sequence[int], num_layers: int) -> Capture:
        got = capture.captured_native(native, num_layers)
        return Capture(got, [k - 1 for k in got], capture.capture_failure(native, num_layers))

    def resolve_flags(self, requested: SpecArgs, arch: str | None) -> tuple[SpecArgs, list[dict[str, Any]]]:
        return flags.resolve_spec_args(requested)

    def known_defects(
        self, version: str | None, arch: str | None, ids: Sequence[int] | None, num_layers: int | None
    ) -> list[KnownDefect]:
        return []

    def defects_coverage(self, version: str | None, arch: str | None) -> str | None:
        lo, hi = versions.SUPPORTED
        return (
            f"no release defect table for vLLM: its capture rules ({version_text(lo)}–{version_text(hi)}) "
            "are applied, its forward loops were not observed per architecture"
        )

    def observed_outcome(self, row: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> Outcome:
        native = row.get("capture_native")
        n = row.get("num_layers")
        expected = (
            [k - 1 for k in capture.captured_native(native, n)]
            if isinstance(native, list) and isinstance(n, int)
            else None
        )
        return outcome_of(row, expected)


ENGINE = VLLM()
