"""The contract every serving engine's knowledge implements, and what is the same for all of them.

eagle3-top stores and shows one layer convention, the canonical one: **k = the output of 0-based
decoder block k; -1 = the embedding output** (SpecForge's). Each engine reads a draft's layer ids by
rules of its own (where in the config, with what fallback), turns them into engine-native capture
points by rules of its own (SGLang: the input of layer ``id + 1``; vLLM: the input of layer ``id``),
rewrites some speculative flags silently, and has releases with known defects. An engine package
under ``tracer/engines/`` states those rules as an :class:`Engine`; the live adapters
(``hooks/<engine>/``), the findings engine, the fix sentences and ``preflight`` ask the engine of the
hello, never ``if sglang``.

Pure Python: nothing here or in an engine package imports an engine, torch or a device.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Version = tuple[int, ...]


def parse_version(text: str | None) -> Version | None:
    """The release numbers of a version string: ``0.5.17`` → (0, 5, 17); ``v0.5.22rc1``,
    ``0.5.17.post1``, ``0.32.0+cpu`` → their release numbers; None for anything that is not a
    version of at least two numbers (``banana``, ``7``, ``""``)."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    m = re.fullmatch(
        r"\s*v?(\d{1,6}(?:\.\d{1,6}){1,3})(?:[.+-]?(?:a|b|rc|post|dev)\d*)*(?:\+[\w.]+)?\s*", text
    )
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_text(v: Version) -> str:
    return ".".join(map(str, v))


def fmt_ids(ids: Sequence[int] | None) -> str:
    """A layer list as written in configs and findings: ``[-1, 2, 5]``."""
    return "[" + ", ".join(map(str, ids or [])) + "]"


@dataclass
class SpecArgs:
    """Speculative flags, in SGLang's vocabulary (an engine with other flags maps them to these)."""

    algorithm: str = "EAGLE3"
    num_steps: int | None = 3
    topk: int | None = 1
    num_draft_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class IdsAsRead:
    """A draft config's aux layer ids as an engine reads them."""

    ids: list[int] | None  # what the engine uses; None: it found none and uses its default layers
    use_aux: bool  # False: the target captures nothing and the draft gets the final hidden state
    declared: list[int] | None  # the ids the config declares, wherever it puts them
    declared_at: str  # where: "eagle_config", "top_level" or "missing"


@dataclass(frozen=True)
class Capture:
    """What a target really captures from an engine-native capture list."""

    native: list[int]  # the slots produced, engine-native, in concatenation order
    canonical: list[int]  # the same slots, canonical
    failure: str | None = None  # the engine fails instead of serving this list, and where


@dataclass(frozen=True)
class KnownDefect:
    """A release range's defect for one target architecture, triggered by a capture case."""

    key: str
    engine: str
    first: Version  # the first release that has it
    last: Version  # the last release seen with it
    fixed_in: Version | None  # the first release seen without it; None: not fixed in any release seen
    architecture: str  # the target's ``architectures[0]``
    case: str  # the capture case that triggers it (the engine's ``case_of``)
    symptom: str  # "crash": the engine dies; "values": a slot silently holds something else
    effect: str  # what happens, one clause
    evidence: str

    @property
    def releases(self) -> str:
        return version_text(self.first) + ("" if self.first == self.last else "–" + version_text(self.last))


NUM_LAYERS = 8  # the depth of the tiny targets the capture cases are written for

# The capture cases every engine's defect matrix is observed on: the ids a draft config writes (None:
# none), nested in ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SpecForge's place) but for
# ``TOP_LEVEL`` cases, written at the config's top level.
CASES: dict[str, list[int] | None] = {
    "distinct": [0, 3, 5],
    "first_one": [1, 3, 5],
    "embedding": [-1, 3, 5],
    "last_layer": [0, 3, NUM_LAYERS - 1],
    "duplicate": [3, 3, 5],
    "out_of_order": [5, 0, 3],
    "default": None,
    "top_level": [0, 3, 5],
}
TOP_LEVEL = frozenset({"top_level"})
CASE_WORDS = {
    "distinct": "any ids (distinct ascending ones included)",
    "first_one": "ids starting at 1",
    "embedding": "the embedding slot (-1)",
    "last_layer": "the last layer's output",
    "duplicate": "a duplicated id",
    "out_of_order": "ids out of ascending order",
    "default": "no ids (the default layers)",
    "top_level": "ids at the config's top level (none read: the default layers)",
}


def cases_of(ids: Sequence[int] | None, num_layers: int | None) -> set[str]:
    """The capture cases a list of ids (as the engine read them; None: none) falls under."""
    if ids is None:
        return {"default", "top_level"}
    ids = list(ids)
    out = {"distinct"}
    if -1 in ids:
        out.add("embedding")
    if num_layers is not None and num_layers - 1 in ids:
        out.add("last_layer")
    if len(set(ids)) < len(ids):
        out.add("duplicate")
    if ids != sorted(ids):
        out.add("out_of_order")
    if ids and ids[0] == 1:
        out.add("first_one")
    return out


@dataclass(frozen=True)
class Outcome:
    kind: str  # clean | crash | values | rules (the capture rules disagree: a bug of ours) | unobserved
    detail: str = ""


def _layer(c: int | None, num_layers: int) -> str:
    if c is None:
        return "no layer's"
    if c == -1:
        return "the embedding output's"
    return "the last block's output" if c == num_layers - 1 else f"block {c}'s output"


def outcome_of(obs: Mapping[str, Any], expected: list[int] | None) -> Outcome:
    """What one observation of an engine's own classes says (``hooks/<engine>/observe`` rows): a
    crash, a slot holding other values than the layer it was captured at, or clean. ``expected``:
    the canonical slots the engine's capture rules give for the observed capture list."""
    for stage, key in (("at start-up", "setup_error"), ("at the first forward", "forward_error")):
        err = obs.get(key)
        if err:
            if str(err).startswith("not observable"):
                return Outcome("unobserved", str(err))
            return Outcome("crash", f"fails {stage}: {err}")
    slots = obs.get("slots")
    if not isinstance(slots, list) or expected is None:
        return Outcome("unobserved", "no slots recorded")
    n = int(obs.get("num_layers") or NUM_LAYERS)
    holds = [s.get("holds") if isinstance(s, Mapping) else None for s in slots]
    if not holds and expected:
        return Outcome(
            "values",
            f"no slot is captured at all where {len(expected)} are set: the forward loop returns no aux "
            "hidden states, so the draft is not fed the layers it was trained on",
        )
    if len(holds) != len(expected):
        return Outcome("rules", f"{len(holds)} slots produced, the capture rules predict {len(expected)}")
    wrong = [(i, e, h) for i, (e, h) in enumerate(zip(expected, holds, strict=True)) if e != h]
    if wrong:
        # written in place after capture (the aliasing defect), or another tensor taken from the start
        moved = {
            i
            for i, s in enumerate(slots)
            if isinstance(s, Mapping) and s.get("shares_storage_with_later_modified")
        }
        groups: dict[tuple[int | None, bool], list[tuple[int, int]]] = {}
        for i, e, h in wrong:
            groups.setdefault((h, i in moved), []).append((i, e))
        parts = [
            f"slot{'s' if len(g) > 1 else ''} {', '.join(str(i) for i, _ in g)} (captured at canonical "
            f"{', '.join(str(e) for _, e in g)}) hold{'' if len(g) > 1 else 's'} {_layer(h, n)} values by the "
            "end of the forward: "
            + (
                "the captured tensor is changed in place after capture"
                if later
                else "another tensor than that layer's output stream is captured"
            )
            for (h, later), g in groups.items()
        ]
        return Outcome("values", "; ".join(parts))
    return Outcome("clean")


@runtime_checkable
class Engine(Protocol):
    """What eagle3-top knows about one serving engine. Implementations are plain objects without
    state; ``tracer.engines.engine(name)`` returns the one registered under a hello's engine name."""

    name: str  # as the hello says it: "sglang", "vllm", "toy"
    title: str  # as a person writes it: "SGLang"
    supported: tuple[Version, Version] | None  # the releases it knows; None: any (the built-in engine)
    ids_key: str  # where it reads the draft's layer ids, as a config path
    ids_where: str  # where a fix puts them, as a person says it: "in the draft's config.json"
    # A module that runs the installed release's own classes for a target and draft config on a CPU
    # (``python -m MODULE --target-config T --draft-config D --case given``: JSON rows on stdout), for
    # ``preflight`` to observe rather than predict; None: none.
    observer: str | None

    def read_ids(self, draft_config: Mapping[str, Any]) -> IdsAsRead:
        """The draft config's layer ids as this engine reads them: where, with what fallback."""
        ...

    def family(self, arch: str | None, model: Any = None) -> str:
        """Which of its capture rules applies to a target: from the live model, else the
        architecture name."""
        ...

    def convention(self, family: str) -> str:
        """The capture rule of a family, one line, for the hello and the findings."""
        ...

    def default_native(self, family: str, num_layers: int) -> list[int]:
        """The capture list it uses when it reads no ids."""
        ...

    def native_from_ids(self, family: str, ids: Sequence[int] | None, num_layers: int) -> list[int]:
        """The capture list it stores for these ids (None: none read)."""
        ...

    def capture(self, family: str, native: Sequence[int], num_layers: int) -> Capture:
        """The slots a target really produces from a stored capture list, in order."""
        ...

    def resolve_flags(self, requested: SpecArgs, arch: str | None) -> tuple[SpecArgs, list[dict[str, Any]]]:
        """Its silent rewrites of the speculative flags: ``(effective, rewrites)``; each rewrite
        ``{"param", "from", "to", "reason"}``. Raises ``ValueError`` (one line) where it would
        refuse to start."""
        ...

    def known_defects(
        self, version: str | None, arch: str | None, ids: Sequence[int] | None, num_layers: int | None
    ) -> list[KnownDefect]:
        """The defects of this release that this target and these (canonical) ids run into."""
        ...

    def defects_coverage(self, version: str | None, arch: str | None) -> str | None:
        """None when the defect table covers this release and architecture; else one line saying
        what it does not cover (a judgement without it is not a clean bill)."""
        ...

    def observed_outcome(self, row: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> Outcome:
        """What one row of its observer says, against its own capture rules; ``baseline``: the same
        target's run with distinct ascending ids (a crash there means the target does not run here)."""
        ...


# -- what every engine shares -------------------------------------------------------------------------


MAX_IDS = 1024  # more ids than any target has layers is not a list of layers


def _int_list(v: Any) -> list[int] | None:
    """A list of layer ids as written, or None when it is not one (strings, floats, bools, a huge list)."""
    if isinstance(v, list) and len(v) <= MAX_IDS and all(type(x) is int for x in v):
        return list(v)
    return None


def declared_ids(cfg: Mapping[str, Any]) -> tuple[list[int] | None, str]:
    """The aux layer ids a draft config declares, and where: ``eagle_config`` (nested, SpecForge's
    place), ``top_level`` or ``missing`` (also for a list that holds anything but integers). Which
    place an engine reads is the engine's own rule (``Engine.read_ids``)."""
    ec = cfg.get("eagle_config")
    if isinstance(ec, Mapping) and (ids := _int_list(ec.get("eagle_aux_hidden_state_layer_ids"))) is not None:
        return ids, "eagle_config"
    if (ids := _int_list(cfg.get("eagle_aux_hidden_state_layer_ids"))) is not None:
        return ids, "top_level"
    return None, "missing"


def version_problem(engine: Engine, version: str | None) -> str | None:
    """None for a release the engine package knows; else why it cannot be judged as known."""
    if engine.supported is None or version is None:
        return None
    v = parse_version(version)
    if v is None:
        return f"{version!r} is not a {engine.title} version"
    lo, hi = engine.supported
    if not lo <= v[: len(lo)] <= hi:
        return (
            f"{engine.title} {version} is outside the releases eagle3-top knows "
            f"({version_text(lo)} – {version_text(hi)})"
        )
    return None


def ids_for(
    engine: Engine, family: str, canonical: Sequence[int], num_layers: int | None
) -> list[int] | None:
    """The ids to write where ``engine`` reads them so that it captures ``canonical``, in that
    order; None when no list does (its rules cannot reach those layers in that order). Checked with
    the engine's own rules, so a fix sentence never names ids that would miss again."""
    want = [int(c) for c in canonical]
    if num_layers is None:
        return None
    native = [c + 1 for c in want]
    # as given, shifted either way, and the native list rotated (an engine whose rule keys on the
    # first id, as SGLang's DeepSeek family does, takes a list whose first id is not that one as given)
    for candidate in (want, native, [c - 1 for c in want], native[1:] + native[:1]):
        stored = engine.native_from_ids(family, candidate, num_layers)
        got = engine.capture(family, stored, num_layers)
        if got.failure is None and got.canonical == want:
            return candidate
    return None


def fix_ids(engine: Engine, family: str | None, canonical: Sequence[int], num_layers: int | None) -> str:
    """The fix sentence's core: which ids to write where, for this engine."""
    ids = ids_for(engine, family or "", canonical, num_layers)
    if ids is None:
        return (
            f"{engine.title} cannot capture canonical {fmt_ids(canonical)} in that order; retrain the draft "
            "on layers in ascending order that it can capture"
        )
    return f"put {engine.ids_key} = {fmt_ids(ids)} {engine.ids_where}"
