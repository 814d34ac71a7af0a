"""What each SGLang release does wrong with an EAGLE-3 draft's layers, as observed, not typed in.

``observed.json`` (beside this module) is a matrix written by ``python -m
eagle3_top.hooks.sglang.observe --matrix`` run against each release from 0.5.17 to 0.5.23
(``make sglang-matrix``): for every target architecture that has a published EAGLE-3 draft and every
capture case (``CASES``), that release's real model class was built at tiny size on a CPU, its own
id reading and ``set_eagle3_layers_to_capture`` run, then its real forward loop, and what came out
was recorded: a crash at start-up or at the first forward, or, per slot, which layer's values the
slot really holds at the end of the forward. ``tests/test_sglang_defects.py`` reruns the installed
releases and fails when one no longer behaves as recorded.

A *defect* is an observation that the capture rules (``capture``) do not explain: a crash, or a slot
that holds other values than the layer it was captured at (a tensor changed in place after
capture). Consecutive releases with the same defect make one :class:`KnownDefect`; the first
release seen without it is where it was fixed.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from eagle3_top.tracer.engines.base import (
    CASE_WORDS,
    CASES,
    NUM_LAYERS,
    TOP_LEVEL,
    KnownDefect,
    Outcome,
    cases_of,
    outcome_of,
    parse_version,
    version_text,
)

from . import capture
from .versions import RELEASES

OBSERVED_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observed.json")
__all__ = [
    "CASES",
    "CASE_WORDS",
    "NUM_LAYERS",
    "TOP_LEVEL",
    "cases_of",
    "coverage",
    "known_defects",
    "outcome",
    "table",
]


def outcome(obs: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> Outcome:
    """What one observation says, against SGLang's capture rules for its architecture. ``baseline``:
    the same architecture's ``distinct`` case on the same release; when even that crashes, the tiny
    copy does not run here and no case of it says anything about capture ("unobserved")."""
    if baseline is not None:
        base = outcome(baseline) if baseline is not obs else None
        if base is None:  # the baseline itself: a crash there is not about any capture case
            own = _outcome(obs)
            if own.kind == "crash":
                return Outcome("unobserved", f"the tiny copy does not start here ({own.detail})")
            return own
        if base.kind in ("crash", "unobserved"):
            return Outcome("unobserved", f"the baseline case does not run here either ({base.detail})")
    return _outcome(obs)


def _outcome(obs: Mapping[str, Any]) -> Outcome:
    native = obs.get("native")
    n = int(obs.get("num_layers") or NUM_LAYERS)
    family = capture.family_of(arch=obs.get("architecture"))
    expected = capture.canonical_from_native(family, native, n) if isinstance(native, list) else None
    return outcome_of(obs, expected)


@functools.lru_cache(maxsize=1)
def observed() -> dict[str, Any]:
    """The checked-in matrix: ``{"generated": {...}, "observations": [...]}``."""
    try:
        with open(OBSERVED_FILE, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return {"generated": {}, "observations": []}
    return data


def _release(version: str | None) -> str | None:
    v = parse_version(version)
    return None if v is None else version_text(v[:3])


@functools.lru_cache(maxsize=1)
def _index() -> dict[tuple[str, str], dict[str, Mapping[str, Any]]]:
    """(release, architecture) -> case -> observation."""
    out: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for obs in observed().get("observations", []):
        key = (str(obs.get("sglang_version")), str(obs.get("architecture")))
        out.setdefault(key, {})[str(obs.get("case"))] = obs
    return out


@functools.lru_cache(maxsize=1)
def table() -> tuple[KnownDefect, ...]:
    """Every defect the matrix shows, releases merged: what ``preflight`` and ``check`` use."""
    index = _index()
    archs = sorted({a for (_, a) in index})
    out: list[KnownDefect] = []
    for arch in archs:
        for case in CASES:
            run: list[tuple[str, Outcome, Mapping[str, Any]]] = []
            for rel in [*RELEASES, None]:  # None closes the last run
                row = index.get((rel, arch), {}) if rel is not None else {}
                obs = row.get(case)
                oc = outcome(obs, row.get("distinct")) if obs is not None else None
                bad = oc is not None and oc.kind in ("crash", "values")
                if run and (not bad or oc is None or oc.kind != run[0][1].kind):
                    fixed = rel if (oc is not None and oc.kind == "clean") else None
                    out.append(_defect(arch, case, run, fixed))
                    run = []
                if bad and oc is not None and obs is not None and rel is not None:
                    run.append((rel, oc, obs))
    return tuple(out)


def _defect(
    arch: str, case: str, run: list[tuple[str, Outcome, Mapping[str, Any]]], fixed: str | None
) -> KnownDefect:
    first, oc, obs = run[0]
    last = run[-1][0]
    v = parse_version
    return KnownDefect(
        key=f"sglang-{arch}-{case}-{first}",
        engine="sglang",
        first=v(first) or (),
        last=v(last) or (),
        fixed_in=v(fixed) if fixed else None,
        architecture=arch,
        case=case,
        symptom=oc.kind,  # crash | values: the only kinds a run holds
        effect=f"with {CASE_WORDS[case]}, {_short(obs.get('model_class'), arch)} {oc.detail}",
        evidence=f"observed running SGLang {first}"
        + ("" if first == last else f" – {last}")
        + f"'s own {obs.get('model_class') or arch} on a CPU, an {obs.get('num_layers') or NUM_LAYERS}-layer "
        "copy of the target with random weights (tracer/engines/sglang/observed.json)",
    )


def _short(model_class: Any, arch: str) -> str:
    """``sglang.srt.models.qwen2.Qwen2ForCausalLM`` -> ``Qwen2ForCausalLM (models/qwen2.py)``."""
    if not isinstance(model_class, str) or "." not in model_class:
        return arch
    module, _, cls = model_class.rpartition(".")
    return f"{cls} (models/{module.rpartition('.')[2]}.py)"


def known_defects(
    version: str | None, arch: str | None, ids: Sequence[int] | None, num_layers: int | None
) -> list[KnownDefect]:
    """The observed defects of this release for this target architecture that these ids (as SGLang
    reads them; None: the default layers) run into."""
    rel = parse_version(version)
    if rel is None or arch is None:
        return []
    triggered = cases_of(ids, num_layers)
    found = [
        d for d in table() if d.architecture == arch and d.case in triggered and d.first <= rel[:3] <= d.last
    ]
    # One defect per symptom: the broadest case that holds (a release that breaks even distinct ids
    # breaks every list, and no choice of layers avoids it), else the first in CASES' order.
    order = {c: i for i, c in enumerate(CASES)}
    found.sort(key=lambda d: (d.case != "distinct", order.get(d.case, len(order))))
    out: list[KnownDefect] = []
    for d in found:
        if all(o.symptom != d.symptom for o in out):
            out.append(d)
    return out


def coverage(version: str | None, arch: str | None) -> str | None:
    """None when the matrix observed this release with this architecture; else what it lacks."""
    rel = _release(version)
    if rel is None:
        return f"no SGLang release to look up ({version!r})" if version else "no SGLang release named"
    if not any(r == rel for (r, _) in _index()):
        return f"SGLang {rel} is not among the releases observed ({', '.join(RELEASES)})"
    if arch is None or (rel, arch) not in _index():
        observed_archs = sorted({a for (r, a) in _index() if r == rel})
        return (
            f"no observation of a {arch or 'target of unknown architecture'} on SGLang {rel} "
            f"(observed: {', '.join(observed_archs)})"
        )
    baseline = _index()[(rel, arch)].get("distinct")
    base = outcome(baseline) if baseline is not None else Outcome("unobserved", "no baseline case")
    if base.kind in ("crash", "unobserved"):
        return f"a {arch} could not be run on SGLang {rel} here ({base.detail})"
    return None


def markdown() -> str:
    """The table as docs/sglang-releases.md shows it (a test keeps the two equal)."""
    lines = [
        "| target architecture | capture case | releases | fixed in | what happens |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = table()
    broad = {(d.architecture, d.symptom, d.first, d.last) for d in rows if d.case == "distinct"}
    for d in rows:
        if d.case != "distinct" and (d.architecture, d.symptom, d.first, d.last) in broad:
            continue  # said by the "any ids" row
        fixed = version_text(d.fixed_in) if d.fixed_in else "not yet"
        what = d.effect.split(", ", 1)[1] if ", " in d.effect else d.effect
        lines.append(f"| {d.architecture} | {CASE_WORDS[d.case]} | {d.releases} | {fixed} | {what} |")
    archs = sorted({a for (_, a) in _index()})
    blind: dict[str, list[str]] = {}
    for arch in archs:
        for rel in RELEASES:
            why = coverage(rel, arch)
            if why is not None:
                blind.setdefault(arch, []).append(rel)
    seen = [a for a in archs if len(blind.get(a, ())) < len(RELEASES)]
    lines += ["", "Observed, with no defect outside the rows above: " + ", ".join(seen) + "."]
    for arch, rels in sorted(blind.items()):
        why = coverage(rels[-1], arch) or ""
        span = rels[0] if len(rels) == 1 else f"{rels[0]}–{rels[-1]}"
        lines.append(f"Not observable here on {span}, so never judged healthy there: {arch}: {why}.")
    return "\n".join(lines) + "\n"
