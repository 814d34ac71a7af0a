"""Findings for the selected source (the analysis's findings engine): code, severity, message, fix."""

from __future__ import annotations

from rich.text import Text

from .snapshot import SourceSnapshot
from .text_panel import TextPanel

_STYLE = {"error": ("✖", "bold red"), "warning": ("▲", "bold yellow"), "info": ("•", "cyan")}


def render_findings(src: SourceSnapshot | None, lines: int, has_manifest: bool) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    if src is None or src.hello is None:
        t.append("findings ", style="bold underline")
        t.append("waiting for a hello", style="dim")
        return t
    if src.findings_error:
        t.append("findings ", style="bold underline")
        t.append(src.findings_error, style="red")
        return t
    if not src.findings:
        t.append("findings ", style="bold underline")
        t.append("none", style="green")
        if not has_manifest:
            t.append(" (no training manifest: structural checks only; --manifest adds the rest)", style="dim")
        return t
    shown = src.findings if len(src.findings) <= lines else src.findings[: lines - 1]
    for i, f in enumerate(shown):
        if i:
            t.append("\n")
        mark, style = _STYLE.get(f.severity, ("•", ""))
        t.append(f"{mark} {f.code} ", style=style)
        t.append(f.message)
        if f.fix:
            t.append(f" → {f.fix}", style="dim")
    if len(shown) < len(src.findings):
        t.append(f"\n… {len(src.findings) - len(shown)} more finding(s): f lists them all", style="dim")
    return t


class FindingsPanel(TextPanel):
    def __init__(self, has_manifest: bool = False, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.has_manifest = has_manifest

    def update_from(self, src: SourceSnapshot | None) -> None:
        n = len(src.findings) if src is not None else 0
        self.styles.height = max(1, min(3, n)) + 1  # + the border line
        self.show(render_findings(src, 3, self.has_manifest))
