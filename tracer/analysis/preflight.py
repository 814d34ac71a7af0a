"""Preflight: what a serving engine will do with a target and an EAGLE-3 draft, predicted from their
config files and the engine's rules (``tracer.engines``), before any GPU is spent.

The prediction is a hello, the one the engine's adapter would publish from the live server: the ids
the engine reads or misses, the layers its target captures and in which order, the aux width
against the draft's ``fc`` (from the draft's safetensors header, else its config), the flags it
rewrites and the release's known defects. The findings engine then judges that hello as it judges a
live one, so ``preflight`` and ``check`` speak the same codes. Where the release itself can be run on
this machine, ``observation`` runs its real classes at tiny size and what they did replaces the
rules' guess.

Reads JSON and a safetensors header only: no torch, no engine import.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, replace
from typing import Any

from eagle3_top.tracer import engines
from eagle3_top.tracer.engines.base import (
    CASES,
    Engine,
    KnownDefect,
    Outcome,
    SpecArgs,
    cases_of,
    fmt_ids,
    parse_version,
    version_problem,
    version_text,
)
from eagle3_top.tracer.schema import SpecConfig
from eagle3_top.tracer.schema.hello import Hello, Rewrite
from eagle3_top.tracer.serving.wiring import (
    DraftFacts,
    LiveCapture,
    SpecReport,
    TargetFacts,
    assemble_hello,
)

from .model_configs import ConfigError, check_draft, check_target, draft_fc_width, read_config

PreflightError = ConfigError  # one line, exit 2


@dataclass(frozen=True)
class Prediction:
    hello: Hello
    engine: Engine
    version: str | None
    version_source: str  # "--<engine>-version", "installed", or "none: the newest release's rules"
    fc_source: str  # where the draft's fc width came from
    notes: tuple[str, ...] = ()


def installed_version(engine: Engine) -> str | None:
    """The installed engine's version, from its package metadata (nothing of it is imported)."""
    for dist in (engine.name, f"{engine.name}-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _spec(s: SpecArgs) -> SpecConfig:
    return SpecConfig(s.algorithm, s.num_steps, s.topk, s.num_draft_tokens)


def predict(
    target_dir: str,
    draft_dir: str,
    requested: SpecArgs,
    version: str | None = None,
    engine_name: str = "sglang",
) -> Prediction:
    """The hello a server of ``engine_name`` at ``version`` (default: the installed one) would
    publish for this target, draft and speculative flags. Raises ``PreflightError`` (one line) for a
    file or a version it cannot judge."""
    engine = engines.engine(engine_name)
    if engine is None:
        raise PreflightError(f"no engine named {engine_name!r} (known: {', '.join(engines.names())})")
    vsrc = f"--{engine.name}-version"
    if version is None:
        version = installed_version(engine)
        vsrc = "installed"
    problem = version_problem(engine, version)
    if problem is not None:
        raise PreflightError(f"{problem}: its rules and defects are unknown, so nothing can be predicted")
    notes: list[str] = []
    if version is None:
        newest = version_text(engine.supported[1]) if engine.supported else None
        vsrc = f"none given or installed: the rules of the newest release {newest}"
        version = newest
    tcfg = read_config(target_dir, "--model-path")
    dcfg = read_config(draft_dir, "--speculative-draft-model-path")
    target = check_target(tcfg, target_dir)
    notes.extend(check_draft(dcfg, draft_dir))
    try:
        effective, rewrites = engine.resolve_flags(requested, target.arch)
    except ValueError as exc:
        raise PreflightError(str(exc)) from None
    ids = engine.read_ids(dcfg)
    family = engine.family(target.arch)
    native = engine.native_from_ids(family, ids.ids, target.num_layers) if ids.use_aux else None
    fc_in, fc_src = draft_fc_width(draft_dir, dcfg, ids.ids)
    hello = assemble_hello(
        engine=engine,
        engine_version=version,
        target=TargetFacts(
            arch=target.arch,
            num_layers=target.num_layers,
            hidden_size=target.hidden_size,
            vocab_size=target.vocab_size,
            capture=LiveCapture(native or [], "predicted", ids.use_aux),
        ),
        draft=DraftFacts(
            config=dcfg,
            arch=_first_arch(dcfg),
            fc_in=fc_in,
            draft_vocab_size=dcfg.get("draft_vocab_size")
            if type(dcfg.get("draft_vocab_size")) is int
            else None,
        ),
        target_path=target_dir,
        draft_path=draft_dir,
        spec=SpecReport(_spec(requested), _spec(effective), tuple(map(Rewrite.from_body, rewrites))),
        use_aux_hidden_state=ids.use_aux,
        ids_read=ids.ids,
    )
    return Prediction(hello, engine, version, vsrc, fc_src, tuple(notes))


def _first_arch(cfg: dict[str, Any]) -> str | None:
    archs = cfg.get("architectures")
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


# -- the release's own classes, where they can run here ---------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What the installed release's own classes did with this pair, on this CPU."""

    row: dict[str, Any]  # one row of the engine's observer (ids read, capture list, slots, errors)
    outcome: Outcome
    seconds: float


def observable(engine: Engine, version: str | None) -> str | None:
    """None when ``preflight`` can run this release's own classes here; else why not (one clause)."""
    if engine.observer is None:
        return f"{engine.title} has no observer"
    installed = installed_version(engine)
    if installed is None:
        return f"{engine.title} is not installed here"
    if importlib.util.find_spec(engine.name) is None:
        return f"{engine.title} {installed} is not importable here"
    want, have = parse_version(version), parse_version(installed)
    if want is not None and have is not None and want[:3] != have[:3]:
        return f"the release installed here is {installed}, not {version}"
    return None


def observe(engine: Engine, target_dir: str, draft_dir: str, timeout_s: float = 300.0) -> Observation | str:
    """Run the engine's observer on this pair in a child interpreter (its progress goes to our
    stderr); the observation, or one line saying why there is none."""
    import json
    import subprocess
    import sys
    import time

    assert engine.observer is not None
    argv = [sys.executable, "-m", engine.observer, "--target-config", os.path.join(target_dir, "config.json"),
            "--draft-config", os.path.join(draft_dir, "config.json"), "--case", "given", "--case", "distinct"]  # fmt: skip
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"{engine.title}'s classes did not finish within {timeout_s:.0f} s"
    except OSError as exc:
        return f"cannot start {engine.observer}: {exc}"
    if r.returncode != 0:
        return f"{engine.observer} exited {r.returncode} (its error is above)"
    try:
        rows = {x["case"]: x for x in json.loads(r.stdout)}
        row, baseline = rows["given"], rows["distinct"]
        assert isinstance(row, dict) and isinstance(baseline, dict)
    except (ValueError, KeyError, AssertionError, TypeError):
        return f"{engine.observer} printed no observation"
    outcome = engine.observed_outcome(row, baseline)
    if outcome.kind == "unobserved":
        return f"{engine.title}'s classes for this architecture do not run on this CPU: {outcome.detail}"
    return Observation(row, outcome, time.monotonic() - t0)


def with_observation(p: Prediction, obs: Observation) -> Prediction:
    """The prediction with what the release's classes really did: the ids they read and the layers
    they capture replace the rules' guess; where the two differ, a note says so (our rules are then
    wrong for this release: a bug to report)."""
    row, h = obs.row, p.hello
    aux = h.aux
    v = row.get("sglang_version") or p.version
    holds = [s.get("holds") for s in row["slots"]] if isinstance(row.get("slots"), list) else None
    what = (
        f"its slots hold canonical {fmt_ids(holds)}, each the layer it was captured at"
        if obs.outcome.kind == "clean" and holds is not None
        else obs.outcome.detail
    )
    notes = [
        f"observed: {p.engine.title} {v}'s own {row.get('model_class')} on this CPU ({obs.seconds:.1f} s): {what}"
    ]
    if aux is None or not isinstance(row.get("native"), list):
        return replace(p, notes=(*p.notes, *notes))
    native = [int(i) for i in row["native"]]
    if (aux.ids_read, aux.capture_native) != (row.get("ids_read"), native):
        notes.append(
            f"the rules predicted ids read {aux.ids_read}, capture {aux.capture_native}; the release read "
            f"{row.get('ids_read')}, captures {native}: the release's behaviour is shown"
        )
    n = h.model.num_layers
    got = p.engine.capture(aux.family or p.engine.family(h.model.arch), native, n) if n else None
    new_aux = replace(
        aux,
        ids_read=row.get("ids_read"),
        use_aux_hidden_state=bool(row.get("use_aux", aux.use_aux_hidden_state)),
        capture_native=native,
        capture_canonical=got.canonical if got is not None else aux.capture_canonical,
        capture_source="observed",
        capture_note=got.failure if got is not None else aux.capture_note,
        slots=len(holds) if holds is not None else aux.slots,
        width=(len(holds) * h.model.hidden_size)
        if (holds is not None and h.model.hidden_size)
        else aux.width,
    )
    return replace(p, hello=replace(h, aux=new_aux), notes=(*p.notes, *notes))


def observed_defect(p: Prediction, obs: Observation) -> KnownDefect | None:
    """The defect the release showed on this very pair (a crash, or a slot changed after capture),
    as a known defect of this release; None when it served the pair cleanly."""
    if obs.outcome.kind not in ("crash", "values"):
        return None
    h, row = p.hello, obs.row
    aux = h.aux
    ids = aux.ids_read if aux is not None else None
    n = h.model.num_layers
    v = parse_version(str(row.get("sglang_version") or p.version)) or ()
    arch = h.model.arch or "?"
    triggered = cases_of(ids, n)
    symptom = obs.outcome.kind  # crash | values
    known = [d for d in p.engine.known_defects(p.version, arch, ids, n) if d.symptom == symptom]
    case = (
        known[0].case if known else next((c for c in CASES if c in triggered and c != "distinct"), "distinct")
    )
    return KnownDefect(
        key=f"{p.engine.name}-{arch}-observed-{version_text(v) if v else '?'}",
        engine=p.engine.name,
        first=v,
        last=v,
        fixed_in=known[0].fixed_in if known else None,
        architecture=arch,
        case=case,
        symptom=symptom,
        effect=f"with these ids ({fmt_ids(ids) if ids is not None else 'none read'}), {obs.outcome.detail}",
        evidence=f"observed just now: {row.get('model_class')} of the installed release, at the target's depth "
        "with random weights, on this CPU",
    )
