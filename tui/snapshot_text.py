"""``eagle3-top --once``: one snapshot as plain text, the sources table and each source's findings,
for a log, a ticket or a terminal without a screen to spare. No colour, no escapes: wire strings are
escaped as on screen."""

from __future__ import annotations

from datetime import datetime, timezone

from eagle3_top.tracer.analysis.findings import ERROR, WARNING, Finding
from eagle3_top.tracer.schema.text import printable

from .snapshot import Snapshot, SourceSnapshot
from .source_state import source_state
from .token_spans import marked_tokens, token_piece
from .tokenizer_shelf import TokenizerShelf

HEADER = ("source", "state", "acc len", "rate", "steps/s", "tok/s", "missed/drop", "findings")


def findings_cell(findings: tuple[Finding, ...], error: str | None = None) -> str:
    """Worst severity and count: "2 errors", "1 warning", "none"; what the table's column shows."""
    if error:
        return "diagnosis failed"
    for severity, word in ((ERROR, "error"), (WARNING, "warning")):
        n = sum(1 for f in findings if f.severity == severity)
        if n:
            return f"{n} {word}{'s' if n > 1 else ''}"
    return f"{len(findings)} info" if findings else "none"


def snapshot_text(snap: Snapshot, tokenizers: TokenizerShelf | None = None) -> str:
    """``tokenizers``: the proposals as text where one is known, else ids."""
    when = datetime.fromtimestamp(snap.now, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    eps = "  ".join(f"{printable(ep, 200)} {st}" for ep, st in snap.endpoints)
    lines = [f"eagle3-top {when}" + (f"  {eps}" if eps else "")]
    rows = [HEADER] + [_row(src, snap) for src in snap.sources]
    if not snap.sources:
        rows.append(("(no source heard)", "", "", "", "", "", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for src in snap.sources:
        lines += _details(src)
        lines += _proposals(src, tokenizers)
    return "\n".join(lines)


def _row(src: SourceSnapshot, snap: Snapshot) -> tuple[str, ...]:
    s = src.summary
    have = s.request_steps > 0
    dropped = src.health.dropped if src.health is not None else None
    return (
        printable(src.name, 120),
        source_state(src, snap.endpoints)[0],
        f"{s.mean_accept_length:.2f}" if have else "—",
        ("no spec" if not src.speculates else f"{s.accept_rate:.1%}") if have else "—",
        f"{s.steps_per_s:,.1f}",
        f"{s.tokens_per_s:,.0f}",
        f"{src.missed}/{dropped if dropped is not None else '—'}",
        findings_cell(src.findings, src.findings_error),
    )


def _details(src: SourceSnapshot) -> list[str]:
    s = src.summary
    out = []
    if not src.speculates:
        out.append(
            f"{printable(src.key, 120)}: no speculation (the target alone, one token per request per step)"
        )
    elif s.request_steps:
        cond = " ".join(f"{x:.2f}" for x in s.conditional)
        uncond = " ".join(f"{x:.2f}" for x in s.unconditional)
        out.append(f"{printable(src.key, 120)}: by position, conditional {cond}; unconditional {uncond}")
    p = src.payoff
    if p is not None:
        out.append(
            f"{printable(src.key, 120)}: {p.tok_s:,.1f} tok/s vs {p.baseline_tok_s:,.1f} without speculation "
            f"(x{p.speedup:.2f}); break-even accept length {p.break_even_accept_length:.2f}, now {p.accept_length:.2f}"
        )
    if src.findings_error:
        out.append(f"  {printable(src.findings_error, 300)}")
    for f in src.findings:
        out.append(f"  {f.severity.upper():7s} {f.code}: {printable(f.message, 600)}")
        out.append(f"          fix: {printable(f.fix, 600)}")
    return out


def _proposals(src: SourceSnapshot, tokenizers: TokenizerShelf | None) -> list[str]:
    if not src.proposals or not src.speculates:
        return []  # a server without speculation proposes nothing
    choice = tokenizers.for_hello(src.hello) if tokenizers is not None else None
    tokens = choice.tokens if choice is not None else None
    how = "as text" if tokens is not None else "ids"
    if choice is not None and choice.note:
        how += f", {printable(choice.note, 300)}"
    legend = "rid [accepted] root │ drafts (✗ rejected) → bonus"
    out = [f"{printable(src.key, 120)}: latest proposals ({how}): {legend}"]
    for p in src.proposals:
        bonus = f" → {token_piece(p.bonus, tokens)}" if p.bonus is not None else ""
        drafts = marked_tokens(p.proposals, p.accepted_mask, tokens)
        out.append(f"  {printable(p.rid, 40)} [{p.accepted}] {token_piece(p.root, tokens)} │ {drafts}{bonus}")
    return out
