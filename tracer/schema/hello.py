"""``hello``: the startup wiring report, repeated every few seconds so that late subscribers catch up.

Built once per engine by ``tracer.serving.wiring.wiring_report`` (both adapters use it) and read tolerantly:
every field may be absent or odd on the wire and reads as its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from eagle3_top.tracer.schema.shared import Shared
from eagle3_top.tracer.schema.tolerant import R, Record, as_int, as_map, as_str, read_record

SPEC_KEYS = ("algorithm", "num_steps", "topk", "num_draft_tokens")
# The effective algorithm of a server that decodes without speculation (SGLang's
# SpeculativeAlgorithm.NONE): its steps are of width 1, one token per request, no draft.
NO_SPECULATION = "NONE"


@dataclass(frozen=True)
class SpecConfig(Record):
    """One side of the speculative config: as requested, or as the server runs it."""

    algorithm: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None

    def get(self, key: str) -> Any:
        return getattr(self, key) if key in SPEC_KEYS else None


@dataclass(frozen=True)
class Rewrite(Record):
    """A flag the server changed silently: ``param`` from ``old`` (None = not given) to ``new``."""

    param: str | None = None
    old: int | str | None = None
    new: int | str | None = None
    reason: str | None = None

    WIRE: ClassVar[Mapping[str, str]] = {"old": "from", "new": "to"}


@dataclass(frozen=True)
class VocabSummary(Record):
    """A draft's d2t map, summarised: enough to judge it without shipping it."""

    size: int | None = None
    sha256: str | None = None
    min_target: int | None = None
    max_target: int | None = None
    unique_targets: int | None = None
    all_zero: bool = False
    vocab_size: int | None = None


@dataclass(frozen=True)
class ModelInfo(Record):
    target_path: str | None = None
    draft_path: str | None = None
    arch: str | None = None  # the target's architecture
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    dtype: str | None = None
    draft_arch: str | None = None
    draft_vocab_size: int | None = None


@dataclass(frozen=True)
class AuxWiring(Record):
    """How the target feeds the draft: the ids the config declares and the server read, the layers
    the live model captures (engine-native and canonical), and the widths on both sides."""

    eagle_config: Mapping[str, Any] | None = None  # the draft config's eagle_config, as written
    declared_ids: list[int] | None = None
    ids_location: str | None = None  # eagle_config | top_level | missing
    ids_read: list[int] | None = None  # None: the server fell back to its default layers
    ids_read_known: bool = True  # False: the adapter could not see what the server read
    use_aux_hidden_state: bool = True
    capture_native: list[int] | None = None
    capture_canonical: list[int] | None = None  # the slots really produced, in concatenation order
    capture_source: str | None = None  # layers_to_capture | _is_layer_to_capture
    capture_note: str | None = None
    family: str | None = None  # which of the engine's capture rules applies (tracer.engines)
    convention: str | None = None
    slots: int | None = None
    width: int | None = None
    expected_width: int | None = None  # the draft fc's input width
    input_width: int | None = None  # the width the engine sizes the draft's input with

    def to_body(self) -> dict[str, Any]:
        body = super().to_body()
        if not self.ids_read_known:
            del body["ids_read"]  # nil would say "fell back to the default"; absent says "not seen"
        return body

    @classmethod
    def from_body(cls, v: Any) -> AuxWiring:
        aux = read_record(cls, v)
        if aux.input_width is None and isinstance(v, Mapping):  # its older name, when only SGLang sent it
            aux = replace(aux, input_width=as_int(v.get("sglang_input_width")))
        known = isinstance(v, Mapping) and "ids_read" in v and v.get("ids_read_known") is not False
        return replace(aux, ids_read_known=known)


@dataclass(frozen=True)
class DraftClaims(Record):
    """What the draft's own directory says its training reached (``tracer.claims``)."""

    acc: list[float] | None = None  # per-position conditional accuracy, acc_1 first
    simulated_acc_len: float | None = None  # accepted drafts per step (SpecForge's, no bonus)
    source: str | None = None  # the file it came from

    @property
    def expected_accept_length(self) -> float | None:
        """Accept length as servers count it (the bonus token included)."""
        return None if self.simulated_acc_len is None else self.simulated_acc_len + 1


@dataclass(frozen=True)
class Parallel(Record):
    """Where the publishing rank sits beyond tensor parallelism: its pipeline stage and its
    data-parallel replica (one source per replica)."""

    pp_rank: int | None = None
    pp_size: int | None = None
    dp_rank: int | None = None


@dataclass(frozen=True)
class Hello(Shared):
    engine: str | None = None
    engine_version: str | None = None
    model: ModelInfo = field(default_factory=ModelInfo)
    tp_rank: int | None = 0
    tp_size: int | None = 1
    requested: SpecConfig | None = None
    effective: SpecConfig | None = None
    rewrites: tuple[Rewrite, ...] = ()
    requested_source: str | None = None  # how the requested values were learnt (SGLang adapter)
    max_running_requests: tuple[int | None, int | None] | None = None  # (requested, effective)
    vocab: VocabSummary | None = None
    aux: AuxWiring | None = None
    wiring_error: str | None = None  # what could not be read (the rest of the hello is partial)
    claims: DraftClaims | None = None  # the draft's own training metrics, when its directory has them
    parallel: Parallel | None = None  # pipeline stage and data-parallel replica, where the adapter knows them

    @property
    def algorithm(self) -> str | None:
        return self.effective.algorithm if self.effective is not None else None

    @property
    def speculates(self) -> bool:
        """False for a server that says it decodes without speculation (no draft to judge)."""
        return self.algorithm != NO_SPECULATION

    @property
    def eagle(self) -> bool:
        """False for a server that says it speculates by another method (vLLM's ngram, MTP, a draft
        model, ...): nothing of it is judged as EAGLE-3. An unknown algorithm is taken as EAGLE-3."""
        return self.algorithm in (None, "EAGLE", "EAGLE3")

    def captures_aux(self) -> bool:
        """False when the server feeds the draft no aux states at all (EAGLE, use_aux_hidden_state off)
        or has no draft."""
        return self.speculates and self.algorithm != "EAGLE" and (self.aux is None or self.aux.slots != 0)

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "engine": {"name": self.engine, "version": self.engine_version},
            "model": self.model.to_body(),
            "tp": {"rank": self.tp_rank, "size": self.tp_size},
            "spec": None,
            "vocab": None if self.vocab is None else self.vocab.to_body(),
            "aux": None if self.aux is None else self.aux.to_body(),
        }
        if self.requested is not None or self.effective is not None:
            spec: dict[str, Any] = {
                "requested": (self.requested or SpecConfig()).to_body(),
                "effective": (self.effective or SpecConfig()).to_body(),
                "rewrites": [r.to_body() for r in self.rewrites],
            }
            if self.requested_source is not None:
                spec["requested_source"] = self.requested_source
            if self.max_running_requests is not None:
                req, eff = self.max_running_requests
                spec["max_running_requests"] = {"requested": req, "effective": eff}
            body["spec"] = spec
        if self.wiring_error is not None:
            body["wiring_error"] = self.wiring_error
        if self.claims is not None:
            body["claims"] = self.claims.to_body()
        if self.parallel is not None:
            body["parallel"] = self.parallel.to_body()
        return body

    @staticmethod
    def from_body(body: Mapping[str, Any]) -> Hello:
        eng, tp, spec = as_map(body.get("engine")), as_map(body.get("tp")), as_map(body.get("spec"))
        rewrites = spec.get("rewrites")
        mrr = spec.get("max_running_requests")
        return Hello(
            engine=as_str(eng.get("name")),
            engine_version=as_str(eng.get("version")),
            model=ModelInfo.from_body(body.get("model")),
            tp_rank=as_int(tp.get("rank")),
            tp_size=as_int(tp.get("size")),
            requested=_opt(SpecConfig, spec.get("requested")),
            effective=_opt(SpecConfig, spec.get("effective")),
            rewrites=tuple(
                Rewrite.from_body(r)
                for r in (rewrites if isinstance(rewrites, list) else [])
                if isinstance(r, Mapping) and isinstance(r.get("param"), str)
            ),
            requested_source=as_str(spec.get("requested_source")),
            max_running_requests=(as_int(mrr.get("requested")), as_int(mrr.get("effective")))
            if isinstance(mrr, Mapping)
            else None,
            vocab=_opt(VocabSummary, body.get("vocab")),
            aux=AuxWiring.from_body(body["aux"]) if isinstance(body.get("aux"), Mapping) else None,
            wiring_error=as_str(body.get("wiring_error")),
            claims=_opt(DraftClaims, body.get("claims")),
            parallel=_opt(Parallel, body.get("parallel")),
        )


def _opt(cls: type[R], v: Any) -> R | None:
    """A record where the wire has a map, None where it has nothing (or something else)."""
    return cls.from_body(v) if isinstance(v, Mapping) else None
