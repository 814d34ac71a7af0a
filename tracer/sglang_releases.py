"""What SGLang releases do wrong with an EAGLE-3 draft's layers: one table, with its evidence, that
the findings (live, ``check``) and ``preflight`` share. docs/sglang-releases.md tells the same facts
for people; tests/test_sglang_releases.py holds each row against the installed release's own model
code.

Layers here are canonical (output of 0-based block k; -1 the embedding output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, ...]

EMBEDDING = -1


def parse_version(text: str | None) -> Version | None:
    """``0.5.17`` → (0, 5, 17); ``0.5.22rc1``, ``0.5.17.post1`` → their release numbers; None for
    anything without one."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _text(v: Version) -> str:
    return ".".join(map(str, v))


@dataclass(frozen=True)
class KnownDefect:
    """A defect of a range of releases, for some target architectures, that a layer list triggers."""

    key: str
    first: Version  # the first release that has it
    last: Version  # the last release that has it
    architectures: tuple[str, ...]  # the target's ``architectures[0]``
    layer: int  # the canonical layer whose slot it breaks
    symptom: str  # "crash": the server dies; "values": the slot silently holds something else
    effect: str
    evidence: str

    @property
    def releases(self) -> str:
        return f"{_text(self.first)}–{_text(self.last)}"

    @property
    def fixed_in(self) -> str:
        return _text((*self.last[:-1], self.last[-1] + 1))

    def affects(self, version: str | None, architecture: str | None, layers: list[int] | None) -> bool:
        v = parse_version(version)
        return (
            v is not None
            and self.first <= v <= self.last
            and architecture in self.architectures
            and self.layer in (layers or [])
        )

    def describe(self, version: str | None, architecture: str | None) -> str:
        """One line: what this release does with that slot."""
        return (
            f"SGLang {version} with a {architecture} target: {self.effect} "
            f"(releases {self.releases}; fixed in {self.fixed_in})"
        )

    def fix(self, trained: list[int] | None = None) -> str:
        instead = (
            f"layers that avoid it (e.g. {_avoiding(trained, self.layer)} instead of {_fmt(trained)})"
            if trained and self.layer in trained
            else f"layers that avoid canonical {self.layer}"
        )
        return f"upgrade SGLang to {self.fixed_in} or later, or retrain the draft on {instead}"


def _fmt(ids: list[int] | None) -> str:
    return "[" + ", ".join(map(str, ids or [])) + "]"


def _avoiding(trained: list[int], layer: int) -> str:
    """The trained list with ``layer`` moved to the nearest block output not already in it."""
    taken = set(trained)
    k = layer + 1
    while k in taken:
        k += 1
    return _fmt(sorted(k if t == layer else t for t in trained))


KNOWN_DEFECTS: tuple[KnownDefect, ...] = (
    KnownDefect(
        key="llama-embedding-slot-crash",
        first=(0, 5, 17),
        last=(0, 5, 21),
        architectures=("LlamaForCausalLM",),
        layer=EMBEDDING,
        symptom="crash",
        effect="capturing the embedding slot (canonical -1, layer 0) computes hidden_states + residual "
        "with residual None, so the first prefill raises TypeError and the scheduler dies",
        evidence="0.5.17 models/llama.py LlamaModel.forward (L426, L437); a real 0.5.17 server on an "
        "H200 serving the built-in pair",
    ),
    KnownDefect(
        key="qwen2-embedding-slot-aliased",
        first=(0, 5, 17),
        last=(0, 5, 20),
        architectures=("Qwen2ForCausalLM",),
        layer=EMBEDDING,
        symptom="values",
        effect="the embedding slot (canonical -1) holds the embedding tensor itself, which later layers' "
        "fused add-RMSNorm update in place: the slot carries a late residual stream, not the embedding "
        "output, while the layer map looks right",
        evidence="0.5.17 models/qwen2.py Qwen2Model.forward (L412-414); the built-in target served as "
        "Qwen2 on a real 0.5.17 server: slot 0 rms 40 vs 0.06 trained, accept length 1.11",
    ),
)


def known_defects(
    engine: str | None, version: str | None, architecture: str | None, layers: list[int] | None
) -> list[KnownDefect]:
    """The defects of this SGLang release that this target architecture and these served
    (canonical) layers run into."""
    if engine != "sglang":
        return []
    return [d for d in KNOWN_DEFECTS if d.affects(version, architecture, layers)]
