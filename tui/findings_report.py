"""Every finding of every source as text a user can read, paste into a ticket or grep: the code,
severity and source, the message, the fix, the evidence and the docs section. The findings screen
draws it; ``c`` there copies it."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from eagle3_top.tracer.analysis.finding_docs import docs_anchor
from eagle3_top.tracer.analysis.findings import Finding
from rich.text import Text

from .snapshot import Snapshot, SourceSnapshot

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}
MAX_EVIDENCE_CHARS = 400  # per finding; a layer map's evidence can run long


def evidence_text(evidence: dict[str, Any]) -> str:
    parts = []
    for k, v in evidence.items():
        if k == "brief":
            continue  # the message already says it
        if k == "explains" and isinstance(
            v, list
        ):  # the symptoms folded in: their codes (the message has their words)
            s = ",".join(str(e.get("code")) for e in v if isinstance(e, dict))
        else:
            s = json.dumps(v, separators=(",", ":"), default=str) if not isinstance(v, str) else v
        parts.append(f"{k}={s}")
    text = " ".join(parts)
    return text if len(text) <= MAX_EVIDENCE_CHARS else text[: MAX_EVIDENCE_CHARS - 1] + "…"


def _ordered(snap: Snapshot, first: str | None) -> list[SourceSnapshot]:
    return sorted(snap.sources, key=lambda s: (s.key != first, s.key))


def findings_report(snap: Snapshot | None, first: str | None = None, width: int | None = None) -> Text:
    """``first``: the selected source, listed before the others; ``width``: the columns to wrap
    in, each field's lines under its own indent (None: one line per field)."""
    t = Text()
    if snap is None or not snap.sources:
        t.append("no source heard yet", style="dim")
        return t
    total = sum(len(s.findings) for s in snap.sources)
    t.append(f"{total} finding(s) over {len(snap.sources)} source(s)\n", style="bold")
    for src in _ordered(snap, first):
        t.append(f"\n{src.name}\n", style="bold cyan")
        if src.hello is None:
            t.append("  waiting for a hello (nothing to judge the wiring on yet)\n", style="dim")
        if src.findings_error:
            t.append(f"  the findings engine failed: {src.findings_error}\n", style="red")
        if not src.findings and src.hello is not None and not src.findings_error:
            t.append("  none\n", style="green")
        for f in src.findings:
            _finding(t, f, width)
    return t


def _finding(t: Text, f: Finding, width: int | None) -> None:
    t.append(f"  {f.severity.upper():<7} ", style=_STYLE.get(f.severity, ""))
    t.append(f"{f.code}\n", style=_STYLE.get(f.severity, ""))
    _field(t, f.message, width)
    if f.fix:
        _field(t, f.fix, width, label="fix: ", label_style="bold")
    if f.evidence:
        _field(t, evidence_text(f.evidence), width, label="evidence: ", label_style="dim", style="dim")
    _field(t, f"docs: {docs_anchor(f.code)}", width, style="dim")


INDENT = "    "


def _field(
    t: Text, text: str, width: int | None, *, label: str = "", label_style: str = "", style: str = ""
) -> None:
    """``label`` and ``text`` from the indent on; wrapped, the lines it continues on start under
    the text (a terminal's own wrap starts them at column 0, under nothing)."""
    if width is None or width - len(INDENT) - len(label) < 20:  # the terminal's own wrap it is
        lines = [label + text]
    else:
        lines = textwrap.wrap(label + text, width - len(INDENT), subsequent_indent=" " * len(label),
                              break_long_words=True, break_on_hyphens=False) or [label]  # fmt: skip
    for i, line in enumerate(lines):
        t.append(INDENT)
        if i == 0 and label:
            t.append(label, style=label_style)
            line = line[len(label) :]
        t.append(line + "\n", style=style)
