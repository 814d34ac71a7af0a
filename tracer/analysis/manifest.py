"""The training manifest: a small JSON file saying how a draft was trained, as typed objects.

``load_manifest`` reads one (checking the version and the shape, and saying in one line which file is
wrong and how); ``write_manifest`` writes one atomically; ``manifest_build`` makes one from what
training left behind. Layer ids are canonical: output of 0-based decoder block k, -1 = embedding.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from eagle3_top.tracer.schema import BONUS, DecodeError, Fingerprint, VocabSummary
from eagle3_top.tracer.schema.tolerant import Record, as_str

MANIFEST_VERSION = 1
MANIFEST_KEY = "eagle3_top_manifest"
CONVENTION = "canonical: output of 0-based decoder block k; -1 = embedding output"


class ManifestError(ValueError):
    """One line: which file and what is wrong."""


def read_json(path: str, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` (a directory means its config.json); ManifestError otherwise."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ManifestError(f"{path}: {what} not found") from None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: {what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: {what} must be a JSON object")
    return data


# -- probe rows as the manifest stores them ------------------------------------------------------


def pack_rows(rows: Any) -> dict[str, Any]:
    """Aux rows (a torch tensor) as float16, base64: a few training samples fit in the JSON."""
    arr = np.ascontiguousarray(rows.float().numpy().astype("<f2"))
    return {"dtype": "<f2", "shape": list(arr.shape), "b64": base64.b64encode(arr.tobytes()).decode()}


def unpack_rows(packed: Mapping[str, Any]) -> np.ndarray:
    raw = base64.b64decode(packed["b64"])
    return np.frombuffer(raw, dtype=packed.get("dtype", "<f2")).reshape(packed["shape"]).astype(np.float32)


# -- the manifest --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetInfo(Record):
    arch: str | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    config: str | None = None  # the target config.json the manifest was built with


@dataclass(frozen=True)
class DraftInfo(Record):
    arch: str | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    norm_before_fc: bool = False
    fc_norm: bool = False
    use_aux_hidden_state: bool = True
    eagle_config: Mapping[str, Any] | None = None
    path: str | None = None
    ids_location: str | None = None  # eagle_config | top_level | missing


@dataclass(frozen=True)
class AuxLayers:
    layer_ids: list[int]  # as the draft config declares them (or SpecForge's default)
    concat_order: list[int]  # the order training concatenated the slots in
    slot_width: int
    ids_source: str | None = None  # eagle_config | top_level | specforge_default
    concat_order_rule: str | None = None  # ascending | list

    @property
    def slots(self) -> int:
        return len(self.concat_order)


@dataclass(frozen=True)
class Reference:
    """Training's fingerprint of every aux slot, over every token row of the files read."""

    fingerprint: Fingerprint
    files: int = 0
    tokens: int = 0
    data: str | None = None


@dataclass(frozen=True)
class ProbeSample:
    """A training sample kept to replay: its prompt ids and the aux rows training computed for them."""

    source: str
    input_ids: list[int]
    aux_rows: Mapping[str, Any]  # packed (``pack_rows``)

    @cached_property
    def rows(self) -> np.ndarray:
        return unpack_rows(self.aux_rows)


@dataclass(frozen=True)
class TrainingMetrics:
    acc: list[float]  # per-position conditional accuracy, acc_i
    simulated_acc_len: float | None  # SpecForge's: accepted drafts, no bonus token
    source: str | None = None

    @property
    def expected_accept_length(self) -> float | None:
        """Training's accept length counted as servers count it (bonus included)."""
        return None if self.simulated_acc_len is None else self.simulated_acc_len + BONUS


@dataclass(frozen=True)
class Manifest:
    path: str
    target: TargetInfo
    draft: DraftInfo
    aux: AuxLayers
    reference: Reference
    probes: tuple[ProbeSample, ...] = ()
    vocab: VocabSummary | None = None
    vocab_source: str | None = None
    training: TrainingMetrics | None = None
    created: str | None = None
    builder: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a newer builder, kept on rewrite

    @property
    def concat_order(self) -> list[int]:
        return list(self.aux.concat_order)

    @property
    def layer_ids(self) -> list[int]:
        return list(self.aux.layer_ids)

    @property
    def slot_width(self) -> int:
        return self.aux.slot_width

    @property
    def training_acc(self) -> list[float]:
        return list(self.training.acc) if self.training is not None else []

    def to_json(self) -> dict[str, Any]:
        vocab = None
        if self.vocab is not None:
            vocab = {**self.vocab.to_body(), "source": self.vocab_source}
        return {
            **self.extra,
            MANIFEST_KEY: MANIFEST_VERSION,
            "created": self.created,
            "builder": self.builder,
            "target": self.target.to_body(),
            "draft": self.draft.to_body(),
            "aux": {
                "layer_ids": self.aux.layer_ids,
                "ids_source": self.aux.ids_source,
                "concat_order": self.aux.concat_order,
                "concat_order_rule": self.aux.concat_order_rule,
                "slots": self.aux.slots,
                "slot_width": self.aux.slot_width,
                "convention": CONVENTION,
            },
            "reference": {
                "files": self.reference.files,
                "tokens": self.reference.tokens,
                "fingerprint": self.reference.fingerprint.to_body(),
                "data": self.reference.data,
            },
            "probes": [
                {"source": p.source, "input_ids": p.input_ids, "aux_rows": dict(p.aux_rows)}
                for p in self.probes
            ],  # fmt: skip
            "vocab": vocab,
            "training": None if self.training is None else dict(self.training.__dict__),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any], path: str = "") -> Manifest:
        """Raises ManifestError (one line) for a file that is not a manifest of this version."""
        version = data.get(MANIFEST_KEY)
        if version is None:
            raise ManifestError(f"{path}: not an eagle3-top manifest (no '{MANIFEST_KEY}' key)")
        if version != MANIFEST_VERSION:
            raise ManifestError(
                f"{path}: manifest version {version!r}; this eagle3-top reads version {MANIFEST_VERSION}"
            )
        try:
            return _parse(data, path)
        except (KeyError, TypeError, ValueError, DecodeError) as exc:
            raise ManifestError(f"{path}: malformed manifest: {type(exc).__name__}: {exc}") from None


def _parse(data: Mapping[str, Any], path: str) -> Manifest:
    aux = data["aux"]
    order = [int(v) for v in aux["concat_order"]]
    fp = Fingerprint.from_body(data["reference"]["fingerprint"])
    if fp.slots != len(order):
        raise ValueError(f"the reference fingerprint has {fp.slots} slots, concat_order {len(order)}")
    ref = data["reference"]
    training = data.get("training")
    probes = tuple(
        ProbeSample(str(p.get("source", k)), [int(v) for v in p["input_ids"]], p["aux_rows"])
        for k, p in enumerate(data.get("probes") or [])
    )
    vocab = data.get("vocab")
    known = {
        MANIFEST_KEY,
        "created",
        "builder",
        "target",
        "draft",
        "aux",
        "reference",
        "probes",
        "vocab",
        "training",
    }
    return Manifest(
        path=os.path.abspath(path) if path else path,
        target=TargetInfo.from_body(data.get("target")),
        draft=DraftInfo.from_body(data.get("draft")),
        aux=AuxLayers(
            layer_ids=[int(v) for v in aux.get("layer_ids", order)],
            concat_order=order,
            slot_width=int(aux["slot_width"]),
            ids_source=as_str(aux.get("ids_source")),
            concat_order_rule=as_str(aux.get("concat_order_rule")),
        ),
        reference=Reference(
            fp, int(ref.get("files") or 0), int(ref.get("tokens") or 0), as_str(ref.get("data"))
        ),
        probes=probes,
        vocab=VocabSummary.from_body(vocab) if isinstance(vocab, dict) else None,
        vocab_source=as_str(vocab.get("source")) if isinstance(vocab, dict) else None,
        training=None
        if not isinstance(training, dict)
        else TrainingMetrics(
            [float(v) for v in training.get("acc") or []],
            float(training["simulated_acc_len"]) if training.get("simulated_acc_len") is not None else None,
            as_str(training.get("source")),
        ),
        created=as_str(data.get("created")),
        builder=as_str(data.get("builder")),
        extra={k: v for k, v in data.items() if k not in known},
    )


def load_manifest(path: str) -> Manifest:
    if os.path.isdir(path):
        raise ManifestError(f"{path}: is a directory, expected a manifest JSON file")
    return Manifest.from_json(read_json(path, "manifest"), path)


def write_manifest(manifest: Manifest, path: str) -> None:
    """Atomic: a temporary file in the same directory, then a rename."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(manifest.to_json(), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
