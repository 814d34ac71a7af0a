"""The training manifest: a small JSON file saying how a draft was trained, as typed objects.

``load_manifest`` reads one (checking the version and the shape, and saying in one line which file is
wrong and how); ``write_manifest`` writes one atomically; ``manifest_build`` makes one from what
training left behind. Layer ids are canonical: output of 0-based decoder block k, -1 = embedding.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import math
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NoReturn

import numpy as np
from eagle3_top.tracer.files import open_regular
from eagle3_top.tracer.schema import BONUS, DecodeError, Fingerprint, VocabSummary
from eagle3_top.tracer.schema.tolerant import R, Record, as_str
from eagle3_top.tracer.serving.fingerprint import SKETCH_DIM

MANIFEST_VERSION = 1
MANIFEST_KEY = "eagle3_top_manifest"
CONVENTION = "canonical: output of 0-based decoder block k; -1 = embedding output"

# What a manifest may hold (docs/protocol.md, "The training manifest"): far above any real draft,
# low enough that a hostile file can stall neither its reader nor the monitor that compares it.
MAX_MANIFEST_BYTES = 64 << 20
MAX_JSON_BYTES = 16 << 20  # a model config.json or a metrics file: real ones are a few KiB
MAX_DEPTH = 64
MAX_SLOTS = 1024  # as many as an aux fingerprint on the wire may carry
MAX_LAYERS = 1024  # canonical layer ids -1 .. MAX_LAYERS - 1
MAX_PROBES = 256
MAX_PROBE_TOKENS = 1 << 16
MAX_SIZE = (1 << 31) - 1  # widths, vocabulary sizes, token ids
MAX_COUNT = 1 << 53  # files, tokens, rows: exact as a JSON number everywhere
MAX_DIGITS = 30  # a longer integer literal is no size of ours, and int() of it is quadratic


class ManifestError(ValueError):
    """One line: which file and what is wrong."""


class _Refused(ValueError):
    """A JSON token the reader refuses (non-finite number, absurd integer)."""


def _no_constant(token: str) -> Any:
    raise _Refused(f"{token} is not a finite number")


def _finite_float(token: str) -> float:
    v = float(token)
    if not math.isfinite(v):
        raise _Refused(f"{token[:20]} overflows a double")
    return v


def _bounded_int(token: str) -> int:
    if len(token.lstrip("-")) > MAX_DIGITS:
        raise _Refused(f"an integer of {len(token.lstrip('-'))} digits")
    return int(token)


def _too_deep(data: Any, limit: int) -> bool:
    """Iterative: the readers downstream may recurse, this check must not."""
    stack = [(data, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        children = v.values() if isinstance(v, dict) else v
        stack.extend((x, depth + 1) for x in children if isinstance(x, (dict, list)))
    return False


def read_json(
    path: str, what: str, *, max_bytes: int = MAX_JSON_BYTES, finite: bool = False
) -> dict[str, Any]:
    """A JSON object from ``path`` (a directory means its config.json); ManifestError otherwise.

    ``finite``: refuse NaN and Infinity (a manifest's numbers are compared; a config may hold them
    in fields nobody reads)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open_regular(path) as f:  # not a FIFO or a device; bounded: it may be huge
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise ManifestError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise ManifestError(f"{path}: {what} is larger than {max_bytes >> 20} MiB")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(
            text,
            parse_int=_bounded_int,
            parse_float=_finite_float if finite else float,
            parse_constant=_no_constant if finite else None,
        )
    except _Refused as exc:
        raise ManifestError(f"{path}: {what} is not valid: {exc}") from None
    except RecursionError:
        raise ManifestError(f"{path}: {what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise ManifestError(f"{path}: {what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: {what} must be a JSON object")
    if _too_deep(data, MAX_DEPTH):
        raise ManifestError(f"{path}: {what} is nested more than {MAX_DEPTH} levels deep")
    return data


def write_atomically(path: str, data: bytes) -> None:
    """``data`` at ``path`` or nothing there: a temporary file in the same directory, then a rename.
    The mode follows the umask, as for any file the user writes (mkstemp's would be 0600)."""
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    while True:
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
        """Raises ManifestError (one line, naming the field) for anything but a manifest of this
        version whose every field has its documented type and range."""
        version = data.get(MANIFEST_KEY)
        if version is None:
            raise ManifestError(f"{path}: not an eagle3-top manifest (no '{MANIFEST_KEY}' key)")
        if type(version) is not int or version != MANIFEST_VERSION:
            raise ManifestError(
                f"{path}: manifest version {_shown(version)}; this eagle3-top reads version {MANIFEST_VERSION}"
            )
        try:
            return _parse(Fields(path), data, path)
        except ManifestError:
            raise
        except (KeyError, TypeError, ValueError, OverflowError, DecodeError) as exc:
            # every field is checked above; this is the net under a check that was forgotten
            raise ManifestError(f"{path}: malformed manifest: {type(exc).__name__}: {exc}") from None


# -- reading a manifest: every field checked, one line naming the first that is wrong -------------


def _shown(v: Any) -> str:
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return f"a list of {len(v)}"
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:39] + "…"


class Fields:
    """Typed reads of a manifest's JSON; ``where`` is the field's path (``aux.concat_order[2]``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> NoReturn:
        raise ManifestError(f"{self.path}: {where}: {what}")

    def expected(self, where: str, expected: str, v: Any) -> NoReturn:
        self.fail(
            where, f"expected {expected}, got {_shown(v)}" if v is not None else f"missing ({expected})"
        )

    def obj(self, v: Any, where: str, *, required: bool = False) -> dict[str, Any]:
        if v is None and not required:
            return {}
        if not isinstance(v, dict):
            self.expected(where, "an object", v)
        return v

    def integer(self, v: Any, where: str, lo: int, hi: int) -> int:
        if type(v) is not int:
            self.expected(where, "an integer", v)
        if not lo <= v <= hi:
            self.expected(where, f"an integer in [{lo}, {hi}]", v)
        return v

    def opt_integer(self, v: Any, where: str, lo: int, hi: int) -> int | None:
        return None if v is None else self.integer(v, where, lo, hi)

    def number(self, v: Any, where: str, lo: float, hi: float) -> float:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            self.expected(where, "a number", v)
        if not lo <= v <= hi:
            self.expected(where, f"a number in [{lo:g}, {hi:g}]", v)
        return float(v)

    def text(self, v: Any, where: str) -> str | None:
        if v is not None and not isinstance(v, str):
            self.expected(where, "a string", v)
        return as_str(v)

    def flag(self, v: Any, where: str) -> None:
        if v is not None and not isinstance(v, bool):
            self.expected(where, "true or false", v)

    def seq(self, v: Any, where: str, max_len: int, *, min_len: int = 0) -> list[Any]:
        if not isinstance(v, list):
            self.expected(where, "a list", v)
        if not min_len <= len(v) <= max_len:
            self.fail(where, f"expected {min_len} to {max_len} entries, got {len(v)}")
        return v

    def integers(self, v: Any, where: str, lo: int, hi: int, max_len: int, *, min_len: int = 0) -> list[int]:
        return [
            self.integer(x, f"{where}[{i}]", lo, hi)
            for i, x in enumerate(self.seq(v, where, max_len, min_len=min_len))
        ]

    def record(self, cls: type[R], v: Any, where: str, bounds: Mapping[str, tuple[int, int]]) -> R:
        """A flat record (target, draft, vocab): each field absent, null or of its declared type."""
        body = self.obj(v, where)
        for f in dataclasses.fields(cls):
            val, at = body.get(f.name), f"{where}.{f.name}"
            if val is None:
                continue
            kind = str(f.type)
            if kind == "int | None":
                self.integer(val, at, *bounds.get(f.name, (0, MAX_SIZE)))
            elif kind == "str | None":
                self.text(val, at)
            elif kind == "bool":
                self.flag(val, at)
            elif kind == "float | None":
                self.number(val, at, -math.inf, math.inf)
            elif kind == "Mapping[str, Any] | None" and not isinstance(val, Mapping):
                self.expected(at, "an object", val)
        return cls.from_body(body)


_LAYER = (-1, MAX_LAYERS - 1)
_PROBE_DTYPES = {"<f2": 2, "<f4": 4}


def _parse(c: Fields, data: Mapping[str, Any], path: str) -> Manifest:
    aux = c.obj(data.get("aux"), "aux", required=True)
    order = c.integers(aux.get("concat_order"), "aux.concat_order", *_LAYER, MAX_SLOTS, min_len=1)
    layer_ids = order
    if aux.get("layer_ids") is not None:
        layer_ids = c.integers(aux["layer_ids"], "aux.layer_ids", *_LAYER, MAX_SLOTS, min_len=1)
    slot_width = c.integer(aux.get("slot_width"), "aux.slot_width", 1, MAX_SIZE)
    if aux.get("slots") is not None and c.integer(aux["slots"], "aux.slots", 1, MAX_SLOTS) != len(order):
        c.fail("aux.slots", f"{aux['slots']}, but aux.concat_order lists {len(order)} layers")

    ref = c.obj(data.get("reference"), "reference", required=True)
    fp_body = c.obj(ref.get("fingerprint"), "reference.fingerprint", required=True)
    try:
        fp = Fingerprint.from_body(fp_body)
    except DecodeError as exc:
        c.fail("reference.fingerprint", str(exc).removeprefix("aux "))
    if fp.slots != len(order):
        c.fail("reference.fingerprint", f"{fp.slots} slots, but aux.concat_order lists {len(order)} layers")
    if any(len(row) != SKETCH_DIM for row in fp.sketch):
        c.fail("reference.fingerprint.sketch", f"expected {SKETCH_DIM} numbers per slot")
    reference = Reference(
        fp,
        c.opt_integer(ref.get("files"), "reference.files", 0, MAX_COUNT) or 0,
        c.opt_integer(ref.get("tokens"), "reference.tokens", 0, MAX_COUNT) or 0,
        c.text(ref.get("data"), "reference.data"),
    )

    probes = []
    raw_probes = data.get("probes")
    for k, p in enumerate([] if raw_probes is None else c.seq(raw_probes, "probes", MAX_PROBES)):
        at = f"probes[{k}]"
        p = c.obj(p, at, required=True)
        ids = c.integers(p.get("input_ids"), f"{at}.input_ids", 0, MAX_SIZE, MAX_PROBE_TOKENS)
        source = c.text(p.get("source"), f"{at}.source")
        rows = _probe_rows(c, p.get("aux_rows"), f"{at}.aux_rows", len(order) * slot_width)
        probes.append(ProbeSample(str(k) if source is None else source, ids, rows))

    vocab = data.get("vocab")
    vocab_summary = None
    if vocab is not None:
        signed = (-MAX_COUNT, MAX_COUNT)  # a broken d2t maps outside the vocabulary: that is a finding
        vocab_summary = c.record(VocabSummary, vocab, "vocab", {"min_target": signed, "max_target": signed})
        c.text(vocab.get("source"), "vocab.source")

    training = None
    if data.get("training") is not None:
        tr = c.obj(data["training"], "training")
        acc = [c.number(a, f"training.acc[{i}]", 0.0, 1.0)
               for i, a in enumerate(c.seq(tr["acc"] if tr.get("acc") is not None else [], "training.acc", MAX_SLOTS))]  # fmt: skip
        sim = tr.get("simulated_acc_len")
        training = TrainingMetrics(
            acc,
            None if sim is None else c.number(sim, "training.simulated_acc_len", 0.0, float(MAX_SLOTS)),
            c.text(tr.get("source"), "training.source"),
        )

    return Manifest(
        path=os.path.abspath(path) if path else path,
        target=c.record(TargetInfo, data.get("target"), "target", {"num_layers": (0, MAX_LAYERS)}),
        draft=c.record(DraftInfo, data.get("draft"), "draft", {}),
        aux=AuxLayers(
            layer_ids=layer_ids,
            concat_order=order,
            slot_width=slot_width,
            ids_source=c.text(aux.get("ids_source"), "aux.ids_source"),
            concat_order_rule=c.text(aux.get("concat_order_rule"), "aux.concat_order_rule"),
        ),
        reference=reference,
        probes=tuple(probes),
        vocab=vocab_summary,
        vocab_source=as_str(vocab.get("source")) if isinstance(vocab, dict) else None,
        training=training,
        created=c.text(data.get("created"), "created"),
        builder=c.text(data.get("builder"), "builder"),
        extra={k: v for k, v in data.items() if k not in _KNOWN},
    )


_KNOWN = frozenset(
    {MANIFEST_KEY, "created", "builder", "target", "draft", "aux", "reference", "probes", "vocab", "training"}
)


def _probe_rows(c: Fields, v: Any, where: str, width: int) -> dict[str, Any]:
    """The packed rows of a probe, checked to unpack to [rows, slots x slot_width]. Rows and input
    ids may differ in number: the comparison aligns them by prompt position."""
    packed = c.obj(v, where, required=True)
    dtype = packed.get("dtype", "<f2")
    if dtype not in _PROBE_DTYPES:
        c.expected(f"{where}.dtype", " or ".join(map(json.dumps, _PROBE_DTYPES)), dtype)
    shape = c.integers(packed.get("shape"), f"{where}.shape", 0, MAX_COUNT, 2, min_len=2)
    if shape[1] != width:
        c.fail(f"{where}.shape", f"{shape}: rows of {shape[1]}, expected {width} (slots x slot width)")
    b64 = packed.get("b64")
    if not isinstance(b64, str):
        c.expected(f"{where}.b64", "a base64 string", b64)
    try:
        size = len(base64.b64decode(b64, validate=True))
    except (binascii.Error, ValueError):
        c.fail(f"{where}.b64", "not valid base64")
    expected = shape[0] * shape[1] * _PROBE_DTYPES[dtype]
    if size != expected:
        c.fail(f"{where}.b64", f"{size} bytes, expected {expected} for shape {shape}")
    return {"dtype": dtype, "shape": shape, "b64": b64}


def load_manifest(path: str) -> Manifest:
    if os.path.isdir(path):
        raise ManifestError(f"{path}: is a directory, expected a manifest JSON file")
    return Manifest.from_json(read_json(path, "manifest", max_bytes=MAX_MANIFEST_BYTES, finite=True), path)


def write_manifest(manifest: Manifest, path: str) -> None:
    """Atomic (``write_atomically``), and only what ``load_manifest`` reads back: a NaN from
    training's numbers, say, is refused here rather than in every later reader. ManifestError (one
    line) otherwise."""
    try:
        text = json.dumps(manifest.to_json(), indent=1, allow_nan=False) + "\n"
    except ValueError:
        raise ManifestError(f"{path}: not written: the manifest would hold a NaN or Infinity") from None
    try:
        Manifest.from_json(json.loads(text), path)
    except ManifestError as exc:
        raise ManifestError(f"not written, it would not load: {exc}") from None
    try:
        write_atomically(path, text.encode())
    except OSError as exc:
        raise ManifestError(f"{path}: cannot write the manifest: {exc.strerror or exc}") from None
