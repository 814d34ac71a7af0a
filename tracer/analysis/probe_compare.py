"""Probe comparison: the aux rows a server fed its draft for a training sample, against the rows
training computed for the same prompt, slot by slot.

Entry (i, j) of the similarity matrix is the mean over aligned prompt positions of the cosine
between served slot i and trained slot j (float32). A served slot *matches* a trained slot at cosine
``MATCH_COSINE`` or more; a healthy server matches along the diagonal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from eagle3_top.tracer.analysis.manifest import Manifest, ProbeSample
from eagle3_top.tracer.schema import ProbeRows

# float32 compare of float16-stored training rows against the engine's own precision
MATCH_COSINE = 0.99


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


def find_manifest_probe(served: ProbeRows, probes: Sequence[ProbeSample]) -> int | None:
    """Index of the manifest probe whose input ids agree with the served ones (by prefix)."""
    ids = served.input_ids.astype(np.int64)
    best, best_n = None, 0
    for k, p in enumerate(probes):
        seg = np.asarray(p.input_ids[served.offset : served.offset + ids.size], dtype=np.int64)
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
    return compare(served, p.input_ids, p.rows, manifest.slot_width, sample=p.source)


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


def verdict_for(c: ProbeComparison) -> str:
    """Short verdict of one comparison (the TUI's panel): ``every slot matches`` or the mapping,
    ``s0→t1 s1→∅`` (served slot → trained slot, ∅ = matches nothing trained)."""
    if c.ok:
        return f"diagonal ok, {c.rows} rows"
    if c.rows == 0:
        return c.note or "no rows to compare"
    return " ".join(f"s{i}→{'∅' if m is None else 't' + str(m)}" for i, m in enumerate(c.mapping))
