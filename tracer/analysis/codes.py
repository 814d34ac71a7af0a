"""Every finding code: its severity, its section in docs/findings.md, the thresholds it reads, and
which symptoms each cause explains.

One cause, one finding: when a cause is found (the layer ids not read, the layer map, the order, the
algorithm, the width, a release defect, the vocabulary map), the symptoms it explains (accept length
far below expected, acceptance below training, the engine's crash, ...) are folded into that
finding as evidence ("explains: accept length 1.19 against 3.80 expected") instead of standing
beside it. A symptom stands alone only when no cause explains it, and then its fix says what to run
next. ``fold`` does that for one source's findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from .finding_docs import docs_anchor
from .findings import ERROR, INFO, WARNING, Finding, worst_first

CAUSE, SYMPTOM, VERDICT = "cause", "symptom", "verdict"

# The symptoms a wrong feed of the draft produces: what any wiring cause explains.
_ACCEPTANCE = ("ACCEPT_LENGTH_FAR_BELOW_EXPECTED", "ACCEPTANCE_BELOW_TRAINING", "ACCEPT_LENGTH_LOW",
               "SPECULATION_SLOWER_THAN_BASELINE", "PROBE_MISMATCH")  # fmt: skip


@dataclass(frozen=True)
class Code:
    code: str
    severity: str  # as usually raised (some findings pick a milder one from their evidence)
    kind: str  # cause | symptom | verdict
    meaning: str
    explains: tuple[str, ...] = ()  # the codes of the symptoms (or causes) this cause accounts for
    thresholds: tuple[str, ...] = ()  # the Thresholds fields it is judged by

    @property
    def docs(self) -> str:
        return docs_anchor(self.code)


# In root-first order: where several causes are present, the symptoms go to the first one.
CODES: tuple[Code, ...] = (
    Code(
        "ALGORITHM_MISMATCH",
        ERROR,
        CAUSE,
        "an EAGLE-3 draft served with --speculative-algorithm EAGLE",
        explains=(*_ACCEPTANCE, "AUX_STATS_DRIFT"),
    ),
    Code(
        "SPECULATION_NOT_EAGLE3",
        ERROR,
        CAUSE,
        "the server speculates by another method than EAGLE: no EAGLE-3 draft is served",
        explains=_ACCEPTANCE,
    ),
    Code(
        "LAYER_IDS_NOT_READ",
        ERROR,
        CAUSE,
        "the engine fell back to its default layers: the ids are absent or not where it reads them",
        explains=(*_ACCEPTANCE, "AUX_STATS_DRIFT", "AUX_WIDTH_MISMATCH", "ENGINE_FAILED"),
    ),
    Code(
        "LAYER_MAP_MISMATCH",
        ERROR,
        CAUSE,
        "the layers served are not the layers trained",
        explains=(*_ACCEPTANCE, "AUX_STATS_DRIFT", "AUX_WIDTH_MISMATCH", "ENGINE_FAILED"),
    ),
    Code(
        "LAYER_ORDER_MISMATCH",
        ERROR,
        CAUSE,
        "the same layers, concatenated in another order",
        explains=(*_ACCEPTANCE, "AUX_STATS_DRIFT"),
    ),
    Code(
        "ENGINE_KNOWN_DEFECT",
        ERROR,
        CAUSE,
        "the serving release was seen to crash on, or corrupt, this target's capture case",
        explains=(*_ACCEPTANCE, "AUX_STATS_DRIFT", "AUX_WIDTH_MISMATCH", "ENGINE_FAILED"),
    ),
    Code(
        "AUX_WIDTH_MISMATCH",
        ERROR,
        CAUSE,
        "the aux width is not what the draft's fc expects",
        explains=(*_ACCEPTANCE, "ENGINE_FAILED"),
    ),
    Code(
        "VOCAB_MAP_INVALID", ERROR, CAUSE, "the d2t map is out of range or inconsistent", explains=_ACCEPTANCE
    ),
    Code("SPEC_PARAM_REWRITTEN", ERROR, CAUSE, "a requested speculative flag was silently changed"),
    Code(
        "AUX_STATS_DRIFT",
        ERROR,
        SYMPTOM,
        "a slot's live values are far from training's though its layer is right",
        explains=_ACCEPTANCE,
        thresholds=("rms_ratio_limit",),
    ),
    Code(
        "PROBE_MISMATCH",
        ERROR,
        SYMPTOM,
        "a replayed training sample's aux rows differ from training's",
        explains=_ACCEPTANCE[:4],
    ),
    Code("ENGINE_FAILED", ERROR, SYMPTOM, "the engine's own forward raised; the stream ends"),
    Code(
        "ACCEPT_LENGTH_FAR_BELOW_EXPECTED",
        ERROR,
        SYMPTOM,
        "accept length far below what training (or the draft's own metrics) says",
        explains=("ACCEPTANCE_BELOW_TRAINING", "SPECULATION_SLOWER_THAN_BASELINE"),
        thresholds=("min_request_steps",),
    ),
    Code(
        "ACCEPTANCE_BELOW_TRAINING",
        WARNING,
        SYMPTOM,
        "per-position acceptance far below training acc_i",
        thresholds=("min_request_steps", "accept_gap"),
    ),
    Code(
        "ACCEPT_LENGTH_LOW",
        WARNING,
        SYMPTOM,
        "a low accept length, with nothing to compare it to",
        thresholds=("min_request_steps", "low_accept_length"),
    ),
    Code(
        "SPECULATION_SLOWER_THAN_BASELINE",
        ERROR,
        SYMPTOM,
        "speculation commits fewer tokens per second than the server without it",
        thresholds=("min_request_steps",),
    ),
    Code("PROBE_OK", INFO, VERDICT, "every served slot matches its trained slot"),
    Code(
        "ENGINE_DEFECTS_UNKNOWN",
        INFO,
        VERDICT,
        "the release defect table has no observation of this release and target: nothing known is not a clean bill",
    ),
)
REGISTRY: dict[str, Code] = {c.code: c for c in CODES}
_ORDER = {c.code: i for i, c in enumerate(CODES)}

# A cause explains a finding only when this says so (default: always). A width mismatch from a
# target of another hidden size is a cause of its own, not a consequence of the layer ids.
_ONLY_WHEN: dict[tuple[str, str], Callable[[Finding], bool]] = {
    (cause, "AUX_WIDTH_MISMATCH"): (lambda f: "slots" in f.evidence and "hidden" not in f.evidence)
    for cause in ("LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH", "ENGINE_KNOWN_DEFECT")
}


def _explains(cause: Finding, other: Finding) -> bool:
    code = REGISTRY.get(cause.code)
    if (
        code is None
        or cause.severity != ERROR
        or other.code not in code.explains
        or other.source != cause.source
    ):
        return False  # a harmless or unsure cause explains nothing
    if cause.code == "ENGINE_KNOWN_DEFECT" and other.code == "ENGINE_FAILED":
        return cause.evidence.get("symptom") == "crash"  # a release that corrupts values does not crash
    only = _ONLY_WHEN.get((cause.code, other.code))
    return only is None or only(other)


def _brief(f: Finding) -> str:
    return str(f.evidence.get("brief") or f.message)


def fold(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """One source's findings with every explained symptom folded into its cause, worst first."""
    items = sorted(findings, key=lambda f: _ORDER.get(f.code, len(_ORDER)))
    taken: set[int] = set()
    out: list[Finding] = []
    for i, f in enumerate(items):
        if i in taken:
            continue
        group = _explained_by(f, items, taken, i)
        if group:
            out.append(_with_symptoms(f, [items[j] for j in group]))
        else:
            out.append(f)
    return worst_first(out)


def _explained_by(cause: Finding, items: Sequence[Finding], taken: set[int], me: int) -> list[int]:
    """Indices of what ``cause`` explains, directly or through what it explains."""
    group: list[int] = []
    frontier = [cause]
    while frontier:
        c = frontier.pop()
        for j, g in enumerate(items):
            if j == me or j in taken or not _explains(c, g):
                continue
            taken.add(j)
            group.append(j)
            frontier.append(g)
    return sorted(group)


def _with_symptoms(cause: Finding, symptoms: list[Finding]) -> Finding:
    crash = [s for s in symptoms if s.code == "ENGINE_FAILED"]
    message = cause.message
    if crash:
        message = f"the engine crashed ({crash[0].evidence.get('engine_error', 'its forward raised')}) because {message}"
    rest = [s for s in symptoms if s.code != "ENGINE_FAILED"]
    if rest:
        message += "; explains: " + "; ".join(_brief(s) for s in rest)
    severity = min(
        (cause.severity, *(s.severity for s in symptoms)), key=lambda s: (ERROR, WARNING, INFO).index(s)
    )
    evidence = {
        **cause.evidence,
        "explains": [{"code": s.code, "message": s.message, "evidence": s.evidence} for s in symptoms],
    }
    return replace(cause, severity=severity, message=message, evidence=evidence)
