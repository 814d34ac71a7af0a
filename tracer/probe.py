"""Probes: replay training samples through a server and compare the aux rows, slot by slot.

A probe request carries ``PROBE_MARKER`` in its rid (``e3t-probe-<sample>-<uuid>``). Engine hooks
publish the prefill aux rows of such requests in ``probe`` events (docs/protocol.md); this module
builds and decodes those bodies, compares served rows with training rows (a slots x slots cosine
matrix and the slot mapping it implies), and runs the whole ``eagle3-top probe`` exchange: subscribe,
send the samples to ``/generate``, collect the rows, judge. No torch and no textual at import.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .diagnose import ERROR, INFO, WARNING, Finding, SourceEvidence, diagnose
from .events import HELLO, PROBE, STEP, DecodeError, Event, step_view
from .manifest import Manifest, unpack_rows

if TYPE_CHECKING:
    from .subscriber import CurveClient

PROBE_MARKER = "e3t-probe"
# A served slot "matches" a trained slot when the mean row cosine reaches this (float32 compare of
# float16-stored training rows against the engine's own precision).
MATCH_COSINE = 0.99
AUX_DTYPE = np.dtype("<f2")
IDS_DTYPE = np.dtype("<i4")
DEFAULT_MAX_NEW_TOKENS = 32


class ProbeError(RuntimeError):
    """Bad input or an unusable server/stream: one line, exit code 2."""


# -- rids ---------------------------------------------------------------------------------------


def probe_rid(sample: int) -> str:
    return f"{PROBE_MARKER}-{sample}-{uuid.uuid4().hex[:12]}"


def is_probe_rid(rid: Any) -> bool:
    """True for a probe request (also after a server suffixes it, e.g. SGLang's ``rid_i``)."""
    return isinstance(rid, str) and PROBE_MARKER in rid


# -- event bodies -------------------------------------------------------------------------------


def probe_body(
    *, rid: str, rows: Any, slots: int, slot_width: int, offset: int, input_ids: Any
) -> dict[str, Any]:
    """Body of a ``probe`` event from host arrays: ``rows`` [R, slots * slot_width], ``input_ids`` [R]."""
    aux = np.ascontiguousarray(np.asarray(rows, dtype=np.float32).reshape(-1, slots * slot_width))
    ids = np.ascontiguousarray(np.asarray(input_ids).reshape(-1), dtype=IDS_DTYPE)
    return {
        "rid": rid,
        "rows": int(aux.shape[0]),
        "slots": int(slots),
        "slot_width": int(slot_width),
        "offset": int(offset),
        "aux": aux.astype(AUX_DTYPE).tobytes(),
        "input_ids": ids.tobytes(),
    }


@dataclass(frozen=True)
class ProbeRows:
    """The aux rows a server fed its draft for one probe request (possibly in several chunks)."""

    rid: str
    offset: int  # first prompt position covered
    slots: int
    slot_width: int
    aux: np.ndarray  # [rows, slots * slot_width] float32
    input_ids: np.ndarray  # [rows] int32

    @property
    def rows(self) -> int:
        return int(self.aux.shape[0])


def _pos_int(body: Mapping[str, Any], key: str) -> int:
    v = body.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise DecodeError(f"probe '{key}' is {v!r}, expected a non-negative integer")
    return v


def decode_probe(body: Mapping[str, Any]) -> ProbeRows:
    rid = body.get("rid")
    if not isinstance(rid, str):
        raise DecodeError("probe 'rid' is not a string")
    rows, slots, width, offset = (_pos_int(body, k) for k in ("rows", "slots", "slot_width", "offset"))
    aux, ids = body.get("aux"), body.get("input_ids")
    if not isinstance(aux, (bytes, bytearray)) or len(aux) != rows * slots * width * AUX_DTYPE.itemsize:
        raise DecodeError(f"probe 'aux' is not {rows}x{slots * width} float16 values")
    if not isinstance(ids, (bytes, bytearray)) or len(ids) != rows * IDS_DTYPE.itemsize:
        raise DecodeError(f"probe 'input_ids' is not {rows} int32 values")
    arr = np.frombuffer(aux, dtype=AUX_DTYPE).astype(np.float32).reshape(rows, slots * width)
    return ProbeRows(rid, offset, slots, width, arr, np.frombuffer(ids, dtype=IDS_DTYPE))


def merge_chunks(chunks: Sequence[ProbeRows]) -> ProbeRows:
    """Chunked prefill publishes several events per request: join the contiguous run from the first."""
    parts = sorted(chunks, key=lambda c: c.offset)
    first = parts[0]
    aux, ids, end = [first.aux], [first.input_ids], first.offset + first.rows
    for c in parts[1:]:
        if c.offset != end or c.slots != first.slots or c.slot_width != first.slot_width:
            continue  # a hole or a different layout: keep the contiguous prefix only
        aux.append(c.aux)
        ids.append(c.input_ids)
        end += c.rows
    return ProbeRows(
        first.rid, first.offset, first.slots, first.slot_width, np.concatenate(aux), np.concatenate(ids)
    )


# -- comparison ---------------------------------------------------------------------------------


def similarity_matrix(served: np.ndarray, trained: np.ndarray, slot_width: int) -> np.ndarray:
    """``[S, T]``: mean over aligned rows of the cosine between served slot i and trained slot j.

    ``served`` is ``[R, S * slot_width]``, ``trained`` ``[R, T * slot_width]``, row r of both at the
    same prompt position. Computed in float32.
    """
    r = min(served.shape[0], trained.shape[0])
    if r == 0:
        raise ValueError("no aligned rows to compare")
    a = np.asarray(served[:r], dtype=np.float32).reshape(r, -1, slot_width)
    b = np.asarray(trained[:r], dtype=np.float32).reshape(r, -1, slot_width)
    a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    out: np.ndarray = np.einsum("rsw,rtw->st", a, b) / np.float32(r)
    return out


def slot_mapping(matrix: np.ndarray, threshold: float = MATCH_COSINE) -> list[int | None]:
    """For each served slot, the trained slot it matches (best cosine ≥ threshold), else None."""
    out: list[int | None] = []
    for i in range(matrix.shape[0]):
        j = int(np.argmax(matrix[i])) if matrix.shape[1] else -1
        out.append(j if j >= 0 and matrix[i, j] >= threshold else None)
    return out


def mapping_ok(mapping: Sequence[int | None], trained_slots: int) -> bool:
    return len(mapping) == trained_slots and all(m == i for i, m in enumerate(mapping))


def mapping_text(
    matrix: np.ndarray,
    mapping: Sequence[int | None],
    trained_layers: Sequence[int] = (),
    served_layers: Sequence[int] = (),
) -> str:
    """``served slot 0 matches trained slot 1 (layer 2); served slot 2 matches nothing trained``."""

    def tname(j: int) -> str:
        return f"trained slot {j}" + (f" (layer {trained_layers[j]})" if j < len(trained_layers) else "")

    def sname(i: int) -> str:
        return f"served slot {i}" + (f" (layer {served_layers[i]})" if i < len(served_layers) else "")

    parts = []
    for i, j in enumerate(mapping):
        if j is None:
            best = int(np.argmax(matrix[i])) if matrix.shape[1] else None
            near = f" (best: {tname(best)}, cos {matrix[i, best]:.2f})" if best is not None else ""
            parts.append(f"{sname(i)} matches nothing trained{near}")
        else:
            parts.append(f"{sname(i)} matches {tname(j)} (cos {matrix[i, j]:.3f})")
    unmatched = [j for j in range(matrix.shape[1]) if j not in mapping]
    if unmatched:
        parts.append("not served: " + ", ".join(tname(j) for j in unmatched))
    return "; ".join(parts)


@dataclass(frozen=True)
class ProbeComparison:
    """One probe request's rows against the training rows of the same sample."""

    rid: str
    sample: str  # the training sample (manifest probe source or file)
    offset: int
    rows: int  # aligned rows compared
    matrix: np.ndarray  # [served slots, trained slots]
    mapping: tuple[int | None, ...]
    ok: bool
    ids_mismatch: int = 0  # aligned positions whose input id differs (should be 0)
    note: str | None = None

    @property
    def diagonal(self) -> list[float]:
        n = min(self.matrix.shape)
        return [float(self.matrix[i, i]) for i in range(n)]


def align(
    served: ProbeRows, trained_ids: Sequence[int], trained_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows of both at the same prompt positions: served covers ``offset..offset+rows``."""
    end = min(served.offset + served.rows, len(trained_ids), trained_rows.shape[0])
    n = max(0, end - served.offset)
    s_ids = served.input_ids[:n].astype(np.int64)
    t_ids = np.asarray(trained_ids[served.offset : served.offset + n], dtype=np.int64)
    mismatch = int(np.count_nonzero(s_ids != t_ids))
    return served.aux[:n], trained_rows[served.offset : served.offset + n], mismatch


def compare(
    served: ProbeRows,
    trained_ids: Sequence[int],
    trained_rows: np.ndarray,
    trained_slot_width: int,
    *,
    sample: str = "",
    threshold: float = MATCH_COSINE,
) -> ProbeComparison:
    t_slots = trained_rows.shape[1] // max(trained_slot_width, 1)
    if served.slot_width != trained_slot_width:
        m = np.zeros((served.slots, t_slots), dtype=np.float32)
        return ProbeComparison(
            served.rid, sample, served.offset, 0, m, tuple([None] * served.slots), False,
            note=f"served slot width {served.slot_width}, trained {trained_slot_width}: not the trained target",
        )  # fmt: skip
    a, b, mismatch = align(served, trained_ids, trained_rows)
    if a.shape[0] == 0:
        m = np.zeros((served.slots, t_slots), dtype=np.float32)
        return ProbeComparison(
            served.rid, sample, served.offset, 0, m, tuple([None] * served.slots), False,
            note=f"no rows to compare (served rows start at prompt position {served.offset})",
        )  # fmt: skip
    matrix = similarity_matrix(a, b, served.slot_width)
    mapping = slot_mapping(matrix, threshold)
    note = None
    if mismatch:
        note = f"{mismatch} of {a.shape[0]} prompt ids differ from the training sample"
    return ProbeComparison(
        served.rid, sample, served.offset, int(a.shape[0]), matrix, tuple(mapping),
        mapping_ok(mapping, t_slots) and not mismatch, mismatch, note,
    )  # fmt: skip


def find_manifest_probe(served: ProbeRows, probes: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the manifest probe whose input ids agree with the served ones (by prefix)."""
    ids = served.input_ids.astype(np.int64)
    best, best_n = None, 0
    for k, p in enumerate(probes):
        pid = p.get("input_ids") or []
        seg = np.asarray(pid[served.offset : served.offset + ids.size], dtype=np.int64)
        n = min(seg.size, ids.size)
        if n and np.array_equal(seg[:n], ids[:n]) and n > best_n:
            best, best_n = k, n
    return best


def compare_with_manifest(served: ProbeRows, manifest: Manifest) -> ProbeComparison | None:
    """The TUI's path: match the probe to a manifest probe by prefix, then compare."""
    k = find_manifest_probe(served, manifest.probes)
    if k is None:
        return None
    p = manifest.probes[k]
    return compare(
        served,
        p["input_ids"],
        unpack_rows(p["aux_rows"]),
        manifest.slot_width,
        sample=str(p.get("source", k)),
    )


def combine(
    comparisons: Sequence[ProbeComparison], threshold: float = MATCH_COSINE
) -> tuple[np.ndarray, list[int | None]] | None:
    """Row-weighted mean matrix over comparisons of one layout, and its mapping."""
    usable = [c for c in comparisons if c.rows > 0]
    if not usable:
        return None
    shape = usable[0].matrix.shape
    same = [c for c in usable if c.matrix.shape == shape]
    w = np.asarray([c.rows for c in same], dtype=np.float64)
    matrix = np.tensordot(w / w.sum(), np.stack([c.matrix for c in same]).astype(np.float64), axes=1)
    return matrix.astype(np.float32), slot_mapping(matrix, threshold)


# -- acceptance fork ----------------------------------------------------------------------------


@dataclass
class AcceptTally:
    request_steps: int = 0
    accept_sum: int = 0  # accept lengths (accepted drafts + 1)

    def add(self, accepted: np.ndarray) -> None:
        self.request_steps += int(accepted.size)
        self.accept_sum += int(accepted.sum()) + int(accepted.size)

    @property
    def mean(self) -> float | None:
        return self.accept_sum / self.request_steps if self.request_steps else None


def low_accept_threshold(expected: float | None, num_draft_tokens: int | None) -> float:
    """Accept length below which acceptance counts as low: halfway between 1 and the training
    expectation (accept length incl. bonus), or 40 % of the way to the verify width."""
    if expected is not None and expected > 1:
        return 1.0 + 0.5 * (expected - 1.0)
    n = num_draft_tokens if isinstance(num_draft_tokens, int) and num_draft_tokens > 1 else 4
    return 1.0 + 0.4 * (n - 1)


# -- the probe exchange -------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    source: str
    input_ids: list[int]
    aux: np.ndarray  # [n, T * slot_width] float32
    slot_width: int | None  # None: take the served one (training files without a manifest)


def samples_from_manifest(manifest: Manifest) -> list[Sample]:
    out = []
    for k, p in enumerate(manifest.probes):
        try:
            out.append(
                Sample(
                    str(p.get("source", k)),
                    [int(t) for t in p["input_ids"]],
                    unpack_rows(p["aux_rows"]),
                    manifest.slot_width,
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"{manifest.path}: probe {k} is malformed: {exc}") from None
    return out


def samples_from_data(data: str, limit: int, max_tokens: int = 256) -> list[Sample]:
    """Training hidden-state files directly (needs torch to read them)."""
    from .trainfiles import TrainFileError, find_training_files, load_sample

    try:
        files = find_training_files(data)
        out = []
        for path in files:
            s = load_sample(path)
            n = min(int(s.aux.shape[0]), int(s.input_ids.shape[0]), max_tokens)
            if n < 2:
                continue
            aux = s.aux[:n].float().numpy()
            width = aux.shape[1] // s.slots if s.slots else None
            out.append(Sample(path, [int(t) for t in s.input_ids[:n]], aux, width))
            if len(out) >= limit:
                break
    except TrainFileError as exc:
        raise ProbeError(str(exc)) from None
    return out


@dataclass
class ProbeResult:
    findings: list[Finding]
    comparisons: list[ProbeComparison]
    matrix: np.ndarray | None
    mapping: list[int | None]
    mapping_text: str
    verdict: str
    probe_accept: float | None  # mean accept length on the training continuations
    probe_accept_source: str
    live_accept: float | None  # mean accept length of other traffic during the probe window
    live_request_steps: int
    waited_s: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "matrix": None if self.matrix is None else np.round(self.matrix, 4).tolist(),
            "mapping": self.mapping,
            "mapping_text": self.mapping_text,
            "probe_accept_length": self.probe_accept,
            "live_accept_length": self.live_accept,
            "live_request_steps": self.live_request_steps,
            "samples": [
                {
                    "rid": c.rid,
                    "sample": c.sample,
                    "offset": c.offset,
                    "rows": c.rows,
                    "ok": c.ok,
                    "diagonal": [round(v, 4) for v in c.diagonal],
                    "note": c.note,
                }
                for c in self.comparisons
            ],  # fmt: skip
            "findings": [f.to_json() for f in self.findings],
            "notes": self.notes,
        }


def _http_json(url: str, payload: Any | None, timeout: float) -> Any:
    """GET (payload None) or POST JSON; returns parsed JSON; raises ProbeError with one line."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method="GET" if payload is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=max(timeout, 0.1)) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()[:2000]
        msg = None
        try:
            err = json.loads(body)
            if isinstance(err, dict):
                e = err.get("error", err.get("detail", err.get("message")))
                msg = e.get("message") if isinstance(e, dict) else e
        except ValueError:
            pass
        if exc.code in (404, 405):
            raise ProbeError(
                f"{url}: HTTP {exc.code}: not an SGLang-compatible server (no /generate)"
            ) from None
        raise ProbeError(
            f"{url}: HTTP {exc.code}: {msg or body.decode(errors='replace').strip()[:200]}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProbeError(f"cannot reach {url}: {reason}") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise ProbeError(f"{url}: the answer is not JSON: not an SGLang-compatible server") from None


def _check_generate_answer(url: str, out: Any) -> dict[str, Any]:
    if isinstance(out, list) and len(out) == 1:
        out = out[0]
    if not isinstance(out, dict) or not isinstance(out.get("meta_info"), dict):
        raise ProbeError(f"{url}: the answer has no meta_info: not an SGLang-compatible /generate")
    return out


def run_probe(
    server: str,
    endpoints: list[str],
    samples: list[Sample],
    *,
    manifest: Manifest | None = None,
    count: int = 4,
    timeout: float = 60.0,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    curve: CurveClient | None = None,
) -> ProbeResult:
    """Subscribe (CURVE-authenticated when ``curve`` is given), replay ``count`` samples through
    ``server``'s /generate, collect and judge."""
    from .subscriber import Subscriber

    if not samples:
        raise ProbeError(
            "no probe samples: the manifest holds none (rebuild it with --probes N) or --data is empty"
        )
    samples = samples[: max(1, count)]
    base = server.rstrip("/")
    if "://" not in base:
        base = "http://" + base
    t0 = time.monotonic()
    deadline = t0 + timeout
    sub = Subscriber(endpoints, curve=curve)
    try:
        hellos: dict[str, dict[str, Any]] = {}
        evidence: dict[str, SourceEvidence] = {}

        def take(evs: list[Event]) -> None:
            for ev in evs:
                if ev.kind == HELLO:
                    hellos[ev.src] = ev.body
                handle(ev)

        chunks: dict[str, list[ProbeRows]] = {}
        probe_steps = AcceptTally()
        live = AcceptTally()
        rids: dict[str, int] = {}

        def handle(ev: Event) -> None:
            src = evidence.get(ev.src)
            if src is None:
                src = evidence[ev.src] = SourceEvidence(ev.src)
            try:
                if ev.kind in (HELLO,):
                    src.add(ev)
                elif ev.kind == STEP:
                    sv = step_view(ev)
                    mask = np.fromiter((is_probe_rid(r) for r in sv.rids), dtype=bool, count=sv.batch)
                    if mask.any():
                        probe_steps.add(sv.accepted[mask])
                    if (~mask).any():
                        live.add(sv.accepted[~mask])
                elif ev.kind == PROBE:
                    rows = decode_probe(ev.body)
                    if rows.rid in rids:
                        chunks.setdefault(rows.rid, []).append(rows)
            except DecodeError as exc:
                sub.count_malformed(str(exc))

        # 1. subscribe first: wait for a hello (the publisher sends one to each new subscriber)
        while not hellos and time.monotonic() < deadline:
            take(sub.poll(50))
        if not hellos:
            states = ", ".join(f"{ep} {st}" for ep, st in sub.endpoints.items())
            raise ProbeError(f"no hello within {timeout:g}s from {states}: is the server publishing there?")
        time.sleep(0.05)

        # 2. send the samples, each from its own (daemon) thread; the stream is read meanwhile
        answers: queue.Queue[tuple[str, Any]] = queue.Queue()
        for k in range(len(samples)):
            rids[probe_rid(k)] = k

        def send(rid: str, s: Sample) -> None:
            payload = {
                "rid": rid,
                "input_ids": s.input_ids,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
            }
            try:
                out = _http_json(base + "/generate", payload, deadline - time.monotonic())
                answers.put((rid, _check_generate_answer(base + "/generate", out)))
            except ProbeError as exc:
                answers.put((rid, exc))
            except Exception as exc:  # never let a thread die silently
                answers.put((rid, ProbeError(f"{base}/generate: {type(exc).__name__}: {exc}")))

        for rid, k in rids.items():
            threading.Thread(target=send, args=(rid, samples[k]), name=f"e3t-probe-{k}", daemon=True).start()

        metas: dict[str, dict[str, Any]] = {}
        errors: list[ProbeError] = []
        answered_at: float | None = None
        while time.monotonic() < deadline:
            take(sub.poll(50))
            while True:
                try:
                    rid, out = answers.get_nowait()
                except queue.Empty:
                    break
                if isinstance(out, ProbeError):
                    errors.append(out)
                else:
                    metas[rid] = out["meta_info"]
            if errors:
                raise errors[0]
            if len(metas) == len(rids):
                answered_at = answered_at or time.monotonic()
                covered = all(
                    rid in chunks and _covers(merge_chunks(chunks[rid]), len(samples[k].input_ids))
                    for rid, k in rids.items()
                )
                # rows arrive before the answer as a rule; give stragglers a short grace
                if covered or time.monotonic() - answered_at > 2.0:
                    break
        take(sub.poll(20))
        if len(metas) < len(rids):
            raise ProbeError(
                f"{base}/generate answered {len(metas)} of {len(rids)} probe requests within {timeout:g}s"
            )
        if not chunks:
            raise ProbeError(
                f"the server answered, but the stream at {', '.join(endpoints)} never showed the probe rows "
                f"(rids {PROBE_MARKER}-*): is this the stream of that server, with probe capture (eagle3-top ≥ 0.2)?"
            )
    finally:
        sub.close()
    waited = time.monotonic() - t0
    return _judge(samples, rids, chunks, metas, probe_steps, live, hellos, evidence, manifest, waited)


def _covers(rows: ProbeRows, prompt_len: int) -> bool:
    return rows.offset == 0 and rows.rows >= prompt_len


def _judge(
    samples: list[Sample],
    rids: dict[str, int],
    chunks: dict[str, list[ProbeRows]],
    metas: dict[str, dict[str, Any]],
    probe_steps: AcceptTally,
    live: AcceptTally,
    hellos: dict[str, dict[str, Any]],
    evidence: dict[str, SourceEvidence],
    manifest: Manifest | None,
    waited: float,
) -> ProbeResult:
    notes: list[str] = []
    comparisons = []
    missing = []
    for rid, k in rids.items():
        s = samples[k]
        if rid not in chunks:
            missing.append(s.source)
            continue
        rows = merge_chunks(chunks[rid])
        width = s.slot_width or rows.slot_width
        c = compare(rows, s.input_ids, s.aux, width, sample=s.source)
        comparisons.append(c)
        if rows.offset > 0 or rows.rows < len(s.input_ids):
            notes.append(
                f"{s.source}: the stream held prompt rows {rows.offset}..{rows.offset + rows.rows - 1} of "
                f"{len(s.input_ids)} (cached prefix rows are not recomputed): use --disable-radix-cache "
                "on the server for complete probes"
            )
        if c.note:
            notes.append(f"{s.source}: {c.note}")
    if missing:
        notes.append(f"no probe rows seen for {len(missing)} sample(s): {', '.join(missing[:3])}")

    trained_layers = manifest.concat_order if manifest is not None else []
    hello = next(iter(hellos.values()), {})
    served_layers = (hello.get("aux") or {}).get("capture_canonical")
    served_layers = served_layers if isinstance(served_layers, list) else []
    combined = combine(comparisons)
    t_slots = comparisons[0].matrix.shape[1] if comparisons else 0
    matrix: np.ndarray | None
    mapping: list[int | None]
    if combined is None:
        matrix, mapping, mtext = None, [], "no aligned rows to compare"
        aux_ok = False
    else:
        matrix, mapping = combined
        mtext = mapping_text(matrix, mapping, trained_layers, served_layers)
        aux_ok = mapping_ok(mapping, t_slots) and all(c.ok for c in comparisons)

    # acceptance on the training continuations: meta_info first, step events of probe rids second
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in metas.values())
    completion = sum(int(m.get("completion_tokens") or 0) for m in metas.values())
    if verify:
        probe_accept: float | None = completion / verify
        pa_src = f"meta_info over {len(metas)} probe requests ({verify} verify steps)"
    else:
        probe_accept = probe_steps.mean
        pa_src = f"step events of the probe rids ({probe_steps.request_steps} request-steps)"
    ndt = ((hello.get("spec") or {}).get("effective") or {}).get("num_draft_tokens")
    expected = None
    if manifest is not None and (manifest.data.get("training") or {}).get("simulated_acc_len") is not None:
        expected = float(manifest.data["training"]["simulated_acc_len"]) + 1.0  # SpecForge omits the bonus
    low = low_accept_threshold(expected, ndt)
    probe_low = probe_accept is not None and probe_accept < low
    live_accept = live.mean
    live_low = (
        live_accept is not None and probe_accept is not None and live_accept < min(low, 0.8 * probe_accept)
    )

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    live_txt = f"live {fmt(live_accept)}" if live_accept is not None else "no live traffic seen"
    accept_txt = f"accept length on training samples {fmt(probe_accept)} ({live_txt}; low below {low:.2f})"

    findings: list[Finding] = []
    for ev in evidence.values():
        findings.extend(diagnose(ev, manifest))
    src = next(iter(hellos), "")
    evid: dict[str, Any] = {
        "matrix": None if matrix is None else np.round(matrix, 4).tolist(),
        "mapping": mapping,
        "mapping_text": mtext,
        "trained_layers": trained_layers,
        "served_layers": served_layers,
        "samples": len(comparisons),
        "rows": sum(c.rows for c in comparisons),
        "probe_accept_length": probe_accept,
        "live_accept_length": live_accept,
    }
    if not aux_ok:
        verdict = "wiring: the draft is fed other hidden states than in training"
        findings.append(
            Finding(
                "PROBE_MISMATCH", ERROR,
                f"replayed training samples: {mtext}; {accept_txt}",
                "serve the draft with the layers (and order) it was trained on: "
                + (f"eagle_config.eagle_aux_hidden_state_layer_ids = {manifest.layer_ids}" if manifest else "check eagle_config.eagle_aux_hidden_state_layer_ids")
                + " in the draft's config.json",
                src, evid,
            )
        )  # fmt: skip
    elif probe_low:
        verdict = "wiring: aux rows match training, yet acceptance is low on the training samples themselves"
        findings.append(
            Finding(
                "ACCEPTANCE_BELOW_TRAINING", ERROR,
                f"aux rows match training slot by slot, but {accept_txt}: not a generalisation problem",
                "check the rest of the draft's wiring: d2t vocabulary map, norm_before_fc/fc_norm, the draft weights and dtype",
                src, evid,
            )
        )  # fmt: skip
    elif live_low:
        verdict = "generalisation: high acceptance on training data, low on live traffic"
        findings.append(
            Finding(
                "ACCEPTANCE_BELOW_TRAINING", WARNING,
                f"aux rows match training and {accept_txt}: the draft does not generalise to this traffic",
                "train the draft on data closer to the live traffic (same chat template, domains, lengths)",
                src, evid,
            )
        )  # fmt: skip
    else:
        verdict = "healthy: every served slot matches its trained slot" + (
            "" if probe_accept is None else f"; {accept_txt}"
        )
        findings.append(
            Finding("PROBE_OK", INFO, f"replayed training samples: {mtext}; {accept_txt}", "", src, evid)
        )
    return ProbeResult(
        findings=findings,
        comparisons=comparisons,
        matrix=matrix,
        mapping=mapping,
        mapping_text=mtext,
        verdict=verdict,
        probe_accept=probe_accept,
        probe_accept_source=pa_src,
        live_accept=live_accept,
        live_request_steps=live.request_steps,
        waited_s=waited,
        notes=notes,
    )


def verdict_for(c: ProbeComparison) -> str:
    """Short verdict of one comparison (the TUI's panel): ``every slot matches`` or the mapping,
    ``s0→t1 s1→∅`` (served slot → trained slot, ∅ = matches nothing trained)."""
    if c.ok:
        return f"diagonal ok, {c.rows} rows"
    if c.rows == 0:
        return c.note or "no rows to compare"
    return " ".join(f"s{i}→{'∅' if m is None else 't' + str(m)}" for i, m in enumerate(c.mapping))
