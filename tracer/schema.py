"""The wire schema, v1: every key of the stream is written and read here, and nowhere else.

One msgpack map per ZeroMQ message: an envelope (``v``, ``kind``, ``src``, ``seq``, ``ts``) and the
kind's own keys beside it (docs/protocol.md). For every kind this module holds the builder the
publishing side calls (both engines' adapters and the tracer) and the typed view every reader gets
(the live monitor, ``check``, ``probe``, the analysis). Validation happens here, once:

- the envelope and the step, aux and probe bodies are strict: a wrong value raises ``DecodeError``
  with one line, because it would corrupt a tally or a comparison;
- the hello and health bodies are tolerant, as the protocol promises: a key that is absent or of
  the wrong type reads as None, so a reader never crashes on an odd or newer publisher.

Step columns are little-endian int32 ``bin`` values: encoding a batch costs one ``tobytes`` per
column, and a reader takes a column with one ``np.frombuffer``. The stream carries accepted draft
tokens (``accepted``); the accept length people quote counts the bonus token too. The two are
converted in ``accepted_drafts`` / ``accept_length`` only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

SCHEMA_VERSION = 1

HELLO = "hello"
STEP = "step"
AUX = "aux"
PROBE = "probe"
HEALTH = "health"
KINDS = frozenset({HELLO, STEP, AUX, PROBE, HEALTH})

TOKEN_DTYPE = np.dtype("<i4")  # step columns and probe input ids
PROBE_AUX_DTYPE = np.dtype("<f2")  # probe rows
# A request whose rid contains this marker is a probe: its prefill aux rows are published.
PROBE_MARKER = "e3t-probe"
# Accept length = accepted draft tokens + the bonus token, as SGLang, vLLM and the EAGLE papers count
# (SpecForge's simulated_acc_len omits it).
BONUS = 1
MAX_FRAME_BIN = 64 << 20


class DecodeError(ValueError):
    """A frame or body that is not valid v1; the message says what is wrong in one line."""


def accepted_drafts(accept_lens: np.ndarray) -> np.ndarray:
    """Engines hold accept lengths (bonus included); the stream carries accepted drafts."""
    return accept_lens - BONUS


def accept_length(accepted: Any) -> Any:
    """Accept length from accepted drafts (array or number)."""
    return accepted + BONUS


# -- envelope ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceId:
    """Who published an event: one engine rank in one process on one host."""

    host: str
    pid: int
    rank: int = 0
    engine: str = "unknown"

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}:r{self.rank}"

    @staticmethod
    def local(rank: int = 0, engine: str = "unknown") -> SourceId:
        return SourceId(socket.gethostname(), os.getpid(), rank, engine)


def split_source_key(key: str) -> tuple[str, str, str]:
    """``HOST:PID:rRANK`` → (host, pid, rank); the host may hold ':' itself (IPv6)."""
    parts = key.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return key, "?", "?"


@dataclass
class Event:
    kind: str
    src: str
    seq: int
    ts: float
    body: dict[str, Any] = field(default_factory=dict)
    version: int = SCHEMA_VERSION


def encode(kind: str, src: str, seq: int, ts: float, body: Mapping[str, Any]) -> bytes:
    msg: dict[str, Any] = {"v": SCHEMA_VERSION, "kind": kind, "src": src, "seq": seq, "ts": ts}
    msg.update(body)
    return msgpack.packb(msg, use_bin_type=True)


def decode(frame: bytes) -> Event:
    """Decode one frame's envelope; raises DecodeError for anything that is not a v1 event."""
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False, max_bin_len=MAX_FRAME_BIN)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise DecodeError(f"not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(msg, dict):
        raise DecodeError(f"not a map: top-level {type(msg).__name__}")
    v = msg.pop("v", None)
    if v != SCHEMA_VERSION:
        raise DecodeError(f"schema version {v!r}, expected {SCHEMA_VERSION}")
    kind, src, seq, ts = (
        msg.pop("kind", None),
        msg.pop("src", None),
        msg.pop("seq", None),
        msg.pop("ts", None),
    )
    if not isinstance(kind, str):
        raise DecodeError(f"missing or non-string 'kind': {kind!r}")
    if not isinstance(src, str):
        raise DecodeError(f"missing or non-string 'src' in {kind} event")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise DecodeError(f"missing or non-integer 'seq' in {kind} event")
    if not isinstance(ts, (int, float)):
        raise DecodeError(f"missing or non-numeric 'ts' in {kind} event")
    return Event(kind, src, seq, float(ts), msg)


# -- tolerant readers (hello, health) ------------------------------------------------------------


def _map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _scalar(v: Any) -> int | str | None:
    return v if type(v) is int or isinstance(v, str) else None


def _ints(v: Any) -> list[int] | None:
    if isinstance(v, (list, tuple)) and all(type(x) is int for x in v):
        return list(v)
    return None


def _bool(v: Any, default: bool | None = None) -> bool | None:
    return v if isinstance(v, bool) else default


# -- hello ---------------------------------------------------------------------------------------

SPEC_KEYS = ("algorithm", "num_steps", "topk", "num_draft_tokens")


@dataclass(frozen=True)
class SpecConfig:
    """One side of the speculative config: as requested, or as the server runs it."""

    algorithm: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None

    def get(self, key: str) -> Any:
        return getattr(self, key, None) if key in SPEC_KEYS else None

    def to_body(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SPEC_KEYS}

    @staticmethod
    def from_body(v: Any) -> SpecConfig | None:
        if not isinstance(v, Mapping):
            return None
        return SpecConfig(_str(v.get("algorithm")), _int(v.get("num_steps")), _int(v.get("topk")),
                          _int(v.get("num_draft_tokens")))  # fmt: skip


@dataclass(frozen=True)
class Rewrite:
    """A flag the server changed silently: ``param`` from ``old`` (None = not given) to ``new``."""

    param: str
    old: int | str | None
    new: int | str | None
    reason: str | None = None

    def to_body(self) -> dict[str, Any]:
        return {"param": self.param, "from": self.old, "to": self.new, "reason": self.reason}

    @staticmethod
    def from_body(v: Any) -> Rewrite | None:
        if not isinstance(v, Mapping) or not isinstance(v.get("param"), str):
            return None
        return Rewrite(v["param"], _scalar(v.get("from")), _scalar(v.get("to")), _str(v.get("reason")))


@dataclass(frozen=True)
class VocabSummary:
    """A draft's d2t map, summarised: enough to judge it without shipping it."""

    size: int | None = None
    sha256: str | None = None
    min_target: int | None = None
    max_target: int | None = None
    unique_targets: int | None = None
    all_zero: bool = False
    vocab_size: int | None = None

    def to_body(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "min_target": self.min_target,
                "max_target": self.max_target, "unique_targets": self.unique_targets,
                "all_zero": self.all_zero, "vocab_size": self.vocab_size}  # fmt: skip

    @staticmethod
    def from_body(v: Any) -> VocabSummary | None:
        if not isinstance(v, Mapping):
            return None
        return VocabSummary(_int(v.get("size")), _str(v.get("sha256")), _int(v.get("min_target")),
                            _int(v.get("max_target")), _int(v.get("unique_targets")),
                            bool(_bool(v.get("all_zero"), False)), _int(v.get("vocab_size")))  # fmt: skip


@dataclass(frozen=True)
class ModelInfo:
    target_path: str | None = None
    draft_path: str | None = None
    arch: str | None = None  # target architecture
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    dtype: str | None = None
    draft_arch: str | None = None
    draft_vocab_size: int | None = None

    def to_body(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def from_body(v: Any) -> ModelInfo:
        m = _map(v)
        return ModelInfo(_str(m.get("target_path")), _str(m.get("draft_path")), _str(m.get("arch")),
                         _int(m.get("num_layers")), _int(m.get("hidden_size")), _int(m.get("vocab_size")),
                         _str(m.get("dtype")), _str(m.get("draft_arch")),
                         _int(m.get("draft_vocab_size")))  # fmt: skip


@dataclass(frozen=True)
class AuxWiring:
    """How the target feeds the draft: the ids the config declares and the server read, the layers
    the live model captures (engine-native and canonical), and the widths on both sides."""

    eagle_config: Mapping[str, Any] | None = None  # the draft config's eagle_config, as written
    declared_ids: list[int] | None = None
    ids_location: str | None = None  # eagle_config | top_level | missing
    ids_read: list[int] | None = None  # None: the server fell back to its default layers
    ids_read_known: bool = True  # False: the adapter could not see what the server read
    use_aux_hidden_state: bool | None = True
    capture_native: list[int] | None = None
    capture_canonical: list[int] | None = None  # the slots really produced, in concatenation order
    capture_source: str | None = None
    capture_note: str | None = None
    family: str | None = None
    convention: str | None = None
    slots: int | None = None
    width: int | None = None
    expected_width: int | None = None  # the draft fc's input width
    sglang_input_width: int | None = None

    def to_body(self) -> dict[str, Any]:
        body = dict(self.__dict__)
        body["eagle_config"] = None if self.eagle_config is None else dict(self.eagle_config)
        if not self.ids_read_known:
            del body["ids_read"]  # nil would say "fell back to the default"; absent says "not seen"
        return body

    @staticmethod
    def from_body(v: Any) -> AuxWiring | None:
        if not isinstance(v, Mapping):
            return None
        ec = v.get("eagle_config")
        return AuxWiring(
            eagle_config=ec if isinstance(ec, Mapping) else None,
            declared_ids=_ints(v.get("declared_ids")),
            ids_location=_str(v.get("ids_location")),
            ids_read=_ints(v.get("ids_read")),
            ids_read_known="ids_read" in v and v.get("ids_read_known") is not False,
            use_aux_hidden_state=_bool(v.get("use_aux_hidden_state"), True),
            capture_native=_ints(v.get("capture_native")),
            capture_canonical=_ints(v.get("capture_canonical")),
            capture_source=_str(v.get("capture_source")),
            capture_note=_str(v.get("capture_note")),
            family=_str(v.get("family")),
            convention=_str(v.get("convention")),
            slots=_int(v.get("slots")),
            width=_int(v.get("width")),
            expected_width=_int(v.get("expected_width")),
            sglang_input_width=_int(v.get("sglang_input_width")),
        )


@dataclass(frozen=True)
class Hello:
    """The startup wiring report, repeated so that late subscribers catch up."""

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

    @property
    def algorithm(self) -> str | None:
        return self.effective.algorithm if self.effective is not None else None

    @property
    def has_spec(self) -> bool:
        return self.requested is not None or self.effective is not None

    def captures_aux(self) -> bool:
        """False when the server feeds the draft no aux states at all (EAGLE, use_aux_hidden_state off)."""
        return self.algorithm != "EAGLE" and (self.aux is None or self.aux.slots != 0)

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "engine": {"name": self.engine, "version": self.engine_version},
            "model": self.model.to_body(),
            "tp": {"rank": self.tp_rank, "size": self.tp_size},
            "spec": None,
            "vocab": None if self.vocab is None else self.vocab.to_body(),
            "aux": None if self.aux is None else self.aux.to_body(),
        }
        if self.has_spec:
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
        return body

    @staticmethod
    def from_body(body: Mapping[str, Any]) -> Hello:
        eng, tp, spec = _map(body.get("engine")), _map(body.get("tp")), _map(body.get("spec"))
        rewrites = spec.get("rewrites")
        mrr = spec.get("max_running_requests")
        return Hello(
            engine=_str(eng.get("name")),
            engine_version=_str(eng.get("version")),
            model=ModelInfo.from_body(body.get("model")),
            tp_rank=_int(tp.get("rank")),
            tp_size=_int(tp.get("size")),
            requested=SpecConfig.from_body(spec.get("requested")),
            effective=SpecConfig.from_body(spec.get("effective")),
            rewrites=tuple(
                r
                for r in map(Rewrite.from_body, rewrites if isinstance(rewrites, list) else [])
                if r is not None
            ),  # fmt: skip
            requested_source=_str(spec.get("requested_source")),
            max_running_requests=(_int(mrr.get("requested")), _int(mrr.get("effective")))
            if isinstance(mrr, Mapping)
            else None,
            vocab=VocabSummary.from_body(body.get("vocab")),
            aux=AuxWiring.from_body(body.get("aux")),
            wiring_error=_str(body.get("wiring_error")),
        )


# -- step ----------------------------------------------------------------------------------------


def column(arr: Any) -> bytes:
    """A token column as wire bytes (int32 little-endian, row-major)."""
    return np.ascontiguousarray(arr, dtype=TOKEN_DTYPE).tobytes()


def step_body(
    *,
    step: int,
    rids: Sequence[str],
    draft: np.ndarray,
    accept_lens: np.ndarray,
    tokens: np.ndarray,
    topk: int = 1,
    parents: np.ndarray | None = None,
    dt: float = 0.0,
    discarded: int = 0,
) -> dict[str, Any]:
    """A step body from host arrays, as the engines hold them: ``draft`` ``[batch, n]`` root first,
    ``accept_lens`` per request counting the bonus token, ``tokens`` the committed tokens request
    after request. ``discarded``: rows the engine threw away and the tracer left out."""
    batch, n = draft.shape
    body = {
        "step": step,
        "batch": batch,
        "n": n,
        "topk": topk,
        "rids": list(rids),
        "draft": column(draft),
        "parents": None if parents is None else column(parents),
        "accepted": column(accepted_drafts(np.asarray(accept_lens))),
        "tokens": column(tokens),
        "dt": dt,
    }
    if discarded:
        body["discarded"] = discarded
    return body


@dataclass(frozen=True)
class StepColumns:
    """A step body whose shape is checked (types and lengths, O(1) in Python): the cheap half of
    the validation. ``check_values`` does the other half for many at once."""

    n: int
    accepted: np.ndarray  # [batch] int32 view over the frame's bytes
    tokens: int  # committed tokens carried


@dataclass(frozen=True)
class StepView:
    """A validated step event."""

    step: int
    batch: int
    n: int  # verify width per request, root included (SGLang's num_draft_tokens)
    topk: int
    rids: list[str]
    draft: np.ndarray  # [batch, n] int32; column 0 is the root (last committed token)
    parents: np.ndarray | None  # [batch, n] int32 parent index in the block, -1 for the root; None = chain
    accepted: np.ndarray  # [batch] int32, accepted draft tokens (bonus not counted)
    tokens: np.ndarray  # [sum(accepted + 1)] int32 committed tokens, request after request
    dt: float  # seconds the verify step took on the engine's clock
    discarded: int = 0  # rows of this verify the engine threw away and the tracer left out

    @property
    def accept_lengths(self) -> np.ndarray:
        out: np.ndarray = accept_length(self.accepted)
        return out


def _count(b: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = b.get(key, default)
    if type(v) is not int or v < 0:
        raise DecodeError(f"step '{key}' is {v!r}, expected a non-negative integer")
    return v


def _bin(b: Mapping[str, Any], key: str, values: int | None, what: str) -> bytes | bytearray:
    raw = b.get(key)
    size = TOKEN_DTYPE.itemsize
    if not isinstance(raw, (bytes, bytearray)) or (
        len(raw) != values * size if values is not None else len(raw) % size
    ):
        raise DecodeError(f"step '{key}' is not {what} int32 values")
    return raw


def step_columns(b: Mapping[str, Any]) -> StepColumns:
    """The shape checks of a step body: every key of the right type and length."""
    batch, n = _count(b, "batch"), _count(b, "n")
    _count(b, "step", 0)
    _count(b, "topk", 1)
    _count(b, "discarded", 0)
    rids = b.get("rids")
    if type(rids) is not list or len(rids) != batch:
        raise DecodeError(f"step 'rids' must be a list of {batch} strings")
    _bin(b, "draft", batch * n, f"{batch}x{n}")
    if b.get("parents") is not None:
        _bin(b, "parents", batch * n, f"{batch}x{n}")
    acc = np.frombuffer(_bin(b, "accepted", batch, str(batch)), dtype=TOKEN_DTYPE)
    tokens = _bin(b, "tokens", None, "a whole number of")
    return StepColumns(n, acc, len(tokens) // TOKEN_DTYPE.itemsize)


def check_values(n: int, accepted: np.ndarray, sizes: np.ndarray, tokens: np.ndarray) -> bool:
    """The value checks of many steps of width ``n`` at once: ``accepted`` is their columns
    concatenated (``sizes`` per step), ``tokens`` the committed tokens each carries. True when every
    accepted count is in [0, n - 1] and every step carries ``sum(accepted + 1)`` tokens."""
    if accepted.size and (int(accepted.min()) < 0 or int(accepted.max()) >= max(n, 1)):
        return False
    expected = sizes.astype(np.int64) * BONUS
    nonempty = sizes > 0
    if nonempty.any():
        starts = np.cumsum(sizes) - sizes
        expected[nonempty] += np.add.reduceat(accepted, starts[nonempty], dtype=np.int64)
    return bool(np.array_equal(expected, tokens))


def step_view(ev: Event) -> StepView:
    """One step event, checked in full; raises DecodeError naming the bad key."""
    b = ev.body
    cols = step_columns(b)
    batch, n = len(b["rids"]), cols.n
    acc = cols.accepted
    if batch and (acc.min() < 0 or acc.max() >= max(n, 1)):
        raise DecodeError(f"step 'accepted' out of range [0, {n - 1}]")
    want = int(acc.sum()) + batch * BONUS
    if cols.tokens != want:
        raise DecodeError(f"step 'tokens' has {cols.tokens} values, expected {want}")
    parents = b.get("parents")
    dt = b.get("dt", 0.0)
    return StepView(
        step=b.get("step", 0),
        batch=batch,
        n=n,
        topk=b.get("topk", 1),
        rids=[str(r) for r in b["rids"]],
        draft=np.frombuffer(b["draft"], dtype=TOKEN_DTYPE).reshape(batch, n),
        parents=None if parents is None else np.frombuffer(parents, dtype=TOKEN_DTYPE).reshape(batch, n),
        accepted=acc,
        tokens=np.frombuffer(b["tokens"], dtype=TOKEN_DTYPE),
        dt=float(dt) if isinstance(dt, (int, float)) else 0.0,
        discarded=b.get("discarded", 0),
    )


# -- aux -----------------------------------------------------------------------------------------


def _floats(v: Any, n: int | None, key: str) -> tuple[float, ...]:
    if not isinstance(v, (list, tuple)) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
    ):
        raise DecodeError(f"aux '{key}' is not a list of numbers")
    if n is not None and len(v) != n:
        raise DecodeError(f"aux '{key}' has {len(v)} values, expected one per slot ({n})")
    return tuple(float(x) for x in v)


@dataclass(frozen=True)
class Fingerprint:
    """Per-slot statistics of aux hidden states: live ones in an aux event, training's in a manifest.

    ``mean``/``std``/``rms``/``absmax`` are over all finite rows of the slot; ``nan``/``inf`` count
    rows; ``sketch`` is each slot's mean row projected on 16 fixed directions.
    """

    rows: int
    slots: int
    slot_width: int
    mean: tuple[float, ...]
    rms: tuple[float, ...]
    std: tuple[float, ...] = ()
    absmax: tuple[float, ...] = ()
    nan: tuple[int, ...] = ()
    inf: tuple[int, ...] = ()
    sketch: tuple[tuple[float, ...], ...] = ()
    rows_total: int | None = None  # a GPU batch was sampled: ``rows`` evenly strided rows of these

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "rows": self.rows, "slots": self.slots, "slot_width": self.slot_width,
            "mean": list(self.mean), "std": list(self.std), "rms": list(self.rms),
            "absmax": list(self.absmax), "nan": list(self.nan), "inf": list(self.inf),
            "sketch": [list(s) for s in self.sketch],
        }  # fmt: skip
        if self.rows_total is not None and self.rows_total != self.rows:
            body["rows_total"] = self.rows_total
        return body

    @staticmethod
    def from_body(b: Mapping[str, Any]) -> Fingerprint:
        """Strict about what is there, lenient about what is optional (std, absmax, nan, inf,
        sketch; rows and width where a hand-made manifest leaves them out)."""
        mean = _floats(b.get("mean"), None, "mean")
        slots = b.get("slots", len(mean))
        rows, width = b.get("rows", 0), b.get("slot_width", 0)
        for key, v in (("slots", slots), ("rows", rows), ("slot_width", width)):
            if type(v) is not int or v < 0:
                raise DecodeError(f"aux '{key}' is {v!r}, expected a non-negative integer")
        if len(mean) != slots:
            raise DecodeError(f"aux 'mean' has {len(mean)} values, expected one per slot ({slots})")

        def opt(key: str) -> tuple[float, ...]:
            return _floats(b[key], slots, key) if b.get(key) is not None else ()

        sketch = b.get("sketch")
        rows_sk: tuple[tuple[float, ...], ...] = ()
        if sketch is not None:
            if not isinstance(sketch, list) or len(sketch) != slots:
                raise DecodeError("aux 'sketch' is not one list per slot")
            rows_sk = tuple(_floats(s, None, "sketch") for s in sketch)
        total = b.get("rows_total")
        return Fingerprint(
            rows=rows, slots=slots, slot_width=width, mean=mean, rms=_floats(b.get("rms"), slots, "rms"),
            std=opt("std"), absmax=opt("absmax"),
            nan=tuple(int(x) for x in opt("nan")), inf=tuple(int(x) for x in opt("inf")),
            sketch=rows_sk, rows_total=total if type(total) is int else None,
        )  # fmt: skip


@dataclass(frozen=True)
class AuxSample:
    """An aux event: the fingerprint of the rows the draft consumed at one sampled step."""

    step: int
    where: str  # read point: fc_input (built-in engine), verify_aux (SGLang)
    fingerprint: Fingerprint


def aux_body(step: int, where: str, fingerprint: Fingerprint) -> dict[str, Any]:
    return {"step": step, "where": where, **fingerprint.to_body()}


def aux_view(ev: Event) -> AuxSample:
    step, where = ev.body.get("step", 0), ev.body.get("where", "")
    return AuxSample(step if type(step) is int else 0, str(where), Fingerprint.from_body(ev.body))


# -- probe ---------------------------------------------------------------------------------------


def is_probe_rid(rid: Any) -> bool:
    """True for a probe request (also after a server suffixes its rid, e.g. SGLang's ``rid_i``)."""
    return isinstance(rid, str) and PROBE_MARKER in rid


def probe_body(
    *, rid: str, rows: Any, slots: int, slot_width: int, offset: int, input_ids: Any
) -> dict[str, Any]:
    """A probe body from host arrays: ``rows`` [R, slots * slot_width], ``input_ids`` [R]."""
    aux = np.ascontiguousarray(np.asarray(rows, dtype=np.float32).reshape(-1, slots * slot_width))
    ids = np.ascontiguousarray(np.asarray(input_ids).reshape(-1), dtype=TOKEN_DTYPE)
    return {
        "rid": rid,
        "rows": int(aux.shape[0]),
        "slots": int(slots),
        "slot_width": int(slot_width),
        "offset": int(offset),
        "aux": aux.astype(PROBE_AUX_DTYPE).tobytes(),
        "input_ids": ids.tobytes(),
    }


@dataclass(frozen=True)
class ProbeRows:
    """The aux rows a server fed its draft for one probe request (one chunk, or chunks merged)."""

    rid: str
    offset: int  # first prompt position covered
    slots: int
    slot_width: int
    aux: np.ndarray  # [rows, slots * slot_width] float32
    input_ids: np.ndarray  # [rows] int32

    @property
    def rows(self) -> int:
        return int(self.aux.shape[0])


def probe_view(body: Mapping[str, Any]) -> ProbeRows:
    rid = body.get("rid")
    if not isinstance(rid, str):
        raise DecodeError("probe 'rid' is not a string")
    vals = []
    for key in ("rows", "slots", "slot_width", "offset"):
        v = body.get(key)
        if type(v) is not int or v < 0:
            raise DecodeError(f"probe '{key}' is {v!r}, expected a non-negative integer")
        vals.append(v)
    rows, slots, width, offset = vals
    aux, ids = body.get("aux"), body.get("input_ids")
    if not isinstance(aux, (bytes, bytearray)) or len(aux) != rows * slots * width * PROBE_AUX_DTYPE.itemsize:
        raise DecodeError(f"probe 'aux' is not {rows}x{slots * width} float16 values")
    if not isinstance(ids, (bytes, bytearray)) or len(ids) != rows * TOKEN_DTYPE.itemsize:
        raise DecodeError(f"probe 'input_ids' is not {rows} int32 values")
    arr = np.frombuffer(aux, dtype=PROBE_AUX_DTYPE).astype(np.float32).reshape(rows, slots * width)
    return ProbeRows(rid, offset, slots, width, arr, np.frombuffer(ids, dtype=TOKEN_DTYPE))


# -- health --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Health:
    """The tracer's own counters, every second."""

    sent: int | None = None
    dropped: int | None = None  # events the publisher could not queue
    queue: int | None = None
    queue_max: int | None = None
    hook_errors: int | None = None
    discarded_rows: int | None = None  # step rows the engine threw away and the tracer left out
    encode_errors: int | None = None
    disabled: bool = False  # the tracer switched itself off after repeated errors
    paused: bool = False  # its pause file exists: nothing is recorded
    last_error: str | None = None

    def to_body(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def from_body(b: Mapping[str, Any]) -> Health:
        return Health(_int(b.get("sent")), _int(b.get("dropped")), _int(b.get("queue")),
                      _int(b.get("queue_max")), _int(b.get("hook_errors")), _int(b.get("discarded_rows")),
                      _int(b.get("encode_errors")), bool(_bool(b.get("disabled"), False)),
                      bool(_bool(b.get("paused"), False)), _str(b.get("last_error")))  # fmt: skip
