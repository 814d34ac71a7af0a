"""The SGLang releases eagle3-top knows: the plugin's hooks are tested against them, and the defect
table (``defects``) was observed on each of them."""

from __future__ import annotations

from eagle3_top.tracer.engines.base import Version

SUPPORTED: tuple[Version, Version] = ((0, 5, 17), (0, 5, 23))
# Every release in that range, oldest first: the defect matrix has a column for each.
RELEASES: tuple[str, ...] = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
