"""``step``: one event per verify step. Per-request data is columnar: little-endian int32 ``bin``
values, so a batch costs one ``tobytes`` per column to encode and one ``np.frombuffer`` to read.

The stream carries accepted draft tokens (``accepted``); the accept length people quote counts the
bonus token too (SGLang, vLLM and the EAGLE papers; SpecForge's simulated_acc_len does not). The
two are converted in ``accepted_drafts`` and ``accept_length`` only.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from eagle3_top.tracer.schema.envelope import DecodeError, Event
from eagle3_top.tracer.schema.shared import Shared
from eagle3_top.tracer.schema.text import printable

TOKEN_DTYPE = np.dtype("<i4")
BONUS = 1  # accept length = accepted drafts + the bonus token


def accepted_drafts(accept_lens: Any) -> np.ndarray:
    """Engines hold accept lengths (bonus included); the stream carries accepted drafts."""
    out: np.ndarray = np.asarray(accept_lens) - BONUS
    return out


def accept_length(accepted: Any) -> Any:
    """Accept length from accepted drafts (an array or a number)."""
    return accepted + BONUS


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
        "accepted": column(accepted_drafts(accept_lens)),
        "tokens": column(tokens),
        "dt": dt,
    }
    if discarded:
        body["discarded"] = discarded
    return body


# What ``step_columns`` hands back: the verify width ``n``, the accepted column (a [batch] int32 view
# over the frame's bytes) and the number of committed tokens carried. A plain tuple: it is made once
# per event on the monitor's ingest path.
StepColumns = tuple[int, np.ndarray, int]


@dataclass(frozen=True)
class StepView(Shared):
    """A validated step event."""

    step: int
    batch: int
    n: int  # verify width per request, root included (SGLang's num_draft_tokens)
    topk: int
    raw_rids: list[Any]  # as on the wire: ``rids`` is the checked copy, made when first read
    draft: np.ndarray  # [batch, n] int32; column 0 is the root (last committed token)
    parents: np.ndarray | None  # [batch, n] int32 parent index in the block, -1 for the root; None = chain
    accepted: np.ndarray  # [batch] int32, accepted draft tokens (bonus not counted)
    tokens: np.ndarray  # [sum(accepted + 1)] int32 committed tokens, request after request
    dt: float  # seconds the verify step took on the engine's clock
    discarded: int = 0  # rows of this verify the engine threw away and the tracer left out
    depths: np.ndarray | None = None  # [batch] the drafts each row's tree proposed; None = chain (n - 1)

    @cached_property
    def rids(self) -> list[str]:
        """The request ids, each a printable string of at most 128 characters: checked when a view
        reads them, not when the step is viewed (a fleet's steps are viewed by the thousand)."""
        return rid_texts(self.raw_rids)

    @property
    def accept_lengths(self) -> np.ndarray:
        out: np.ndarray = accept_length(self.accepted)
        return out


_COUNTS = (("step", 0), ("topk", 1), ("discarded", 0))  # optional non-negative integers
# Bounds far beyond any server (SGLang verifies at most a few hundred tokens per request, batches
# of a few thousand): a frame past them is corrupt or hostile, and its shape must not reach a
# reshape or an allocation.
MAX_WIDTH = 4096
MAX_BATCH = 1 << 16
MAX_RID = 128  # characters of a request id shown; SGLang's are uuid4 hex (32)
_INT32 = TOKEN_DTYPE.itemsize
_BIN = (bytes, bytearray)  # what msgpack hands back for bin


def _bad_count(key: str, v: Any) -> DecodeError:
    return DecodeError(f"step '{key}' is {str(v)[:40]!r}, expected a non-negative integer")


def step_columns(b: Mapping[str, Any]) -> StepColumns:
    """The shape checks of a step body, every key of the right type and length: the cheap half of
    the validation, a handful of dict lookups per event; ``check_values`` does the other half for many
    events at once."""
    batch, n = b.get("batch"), b.get("n")
    if type(batch) is not int or not 0 <= batch <= MAX_BATCH:
        raise DecodeError(f"step 'batch' is {str(batch)[:40]!r}, expected an integer in [0, {MAX_BATCH}]")
    if type(n) is not int or not 0 <= n <= MAX_WIDTH:
        raise DecodeError(f"step 'n' is {str(n)[:40]!r}, expected an integer in [0, {MAX_WIDTH}]")
    for key, default in _COUNTS:
        v = b.get(key, default)
        if type(v) is not int or v < 0:
            raise _bad_count(key, v)
    rids = b.get("rids")
    if type(rids) is not list or len(rids) != batch:
        raise DecodeError(f"step 'rids' must be a list of {batch} strings")
    cells = batch * n * _INT32
    draft: Any = b.get("draft")
    parents: Any = b.get("parents")
    if type(draft) not in _BIN or len(draft) != cells:
        raise DecodeError(f"step 'draft' is not {batch}x{n} int32 values")
    if parents is not None and (type(parents) not in _BIN or len(parents) != cells):
        raise DecodeError(f"step 'parents' is not {batch}x{n} int32 values")
    acc: Any = b.get("accepted")
    tokens: Any = b.get("tokens")
    if type(acc) not in _BIN or len(acc) != batch * _INT32:
        raise DecodeError(f"step 'accepted' is not {batch} int32 values")
    if type(tokens) not in _BIN or len(tokens) % _INT32:
        raise DecodeError("step 'tokens' is not a whole number of int32 values")
    return n, np.frombuffer(acc, dtype=TOKEN_DTYPE), len(tokens) // _INT32


def row_depths(parents: np.ndarray) -> np.ndarray:
    """The depth of each row's draft tree from its ``parents`` ``[rows, n]`` (-1 for the root): the
    most drafts a request of that row can accept. A row whose links are no tree (a parent not
    before its child) is read as a chain, ``n - 1``, as a step without ``parents``. One numpy pass
    per column over all the rows, however many steps they came from."""
    rows, n = parents.shape
    depth = np.zeros((rows, max(n, 1)), dtype=np.int32)
    tree = np.ones(rows, dtype=bool)
    at = np.arange(rows)
    for j in range(1, n):
        p = parents[:, j]
        tree &= (p >= 0) & (p < j)
        depth[:, j] = depth[at, np.clip(p, 0, j - 1)] + 1
    out: np.ndarray = np.where(tree, depth.max(axis=1), max(n - 1, 0))
    return out


def step_depths(bodies: Sequence[Mapping[str, Any]], n: int, sizes: np.ndarray) -> np.ndarray | None:
    """Per request-step, the most drafts it could accept, for steps of width ``n`` whose columns
    passed ``step_columns`` (``sizes``: their batches): None when every step is a chain (each row
    ``n - 1``: the common case costs nothing). The trees' rows are stacked and walked once."""
    trees = [i for i, b in enumerate(bodies) if b.get("parents") is not None]
    if not trees or n <= 1:
        return None
    stacked = np.frombuffer(b"".join(bodies[i]["parents"] for i in trees), dtype=TOKEN_DTYPE)
    depths = row_depths(stacked.reshape(-1, n))
    if len(trees) == len(bodies):
        return depths
    out = np.full(int(sizes.sum()), n - 1, dtype=depths.dtype)
    starts = np.cumsum(sizes) - sizes
    out[np.concatenate([np.arange(starts[i], starts[i] + sizes[i]) for i in trees])] = depths
    return out


def check_values(
    n: int, accepted: np.ndarray, sizes: np.ndarray, tokens: np.ndarray, depths: np.ndarray | None = None
) -> bool:
    """The value checks of many steps of width ``n`` at once: ``accepted`` is their columns
    concatenated (``sizes`` per step), ``tokens`` the committed tokens each carries, ``depths`` what
    each request-step could accept (``step_depths``). True when every accepted count is in
    [0, depth] (a chain: n - 1) and every step carries ``sum(accepted + 1)`` tokens. A count past
    the drafts proposed would make an accept rate above 100%: the step is refused, not folded in."""
    if accepted.size and (int(accepted.min()) < 0 or int(accepted.max()) >= max(n, 1)):
        return False
    if depths is not None and bool((accepted > depths).any()):
        return False
    expected = sizes.astype(np.int64) * BONUS
    nonempty = sizes > 0
    if nonempty.any():
        starts = np.cumsum(sizes) - sizes
        expected[nonempty] += np.add.reduceat(accepted, starts[nonempty], dtype=np.int64)
    return bool(np.array_equal(expected, tokens))


class _ShortRepr(reprlib.Repr):
    """``repr`` cut short, bytes by their length: an odd rid off the wire (a 64 MiB bin, a long
    list) costs its name, not a copy of itself as text."""

    def repr_bytes(self, x: bytes, level: int) -> str:
        return f"({len(x)} bytes)"

    repr_bytearray = repr_bytes


_SHORT = _ShortRepr()


def rid_text(r: Any) -> str:
    """A request id as every view shows it: a short printable string as is, any other string
    escaped (``text.printable``) and cut to 128 characters, anything else named by its type and
    value. The one form, so that a rid reads the same in the requests table, a timeline and the
    proposals, and a rid picked in one is found in the others."""
    if type(r) is not str:
        return printable(f"<{type(r).__name__} {_SHORT.repr(r)}>", MAX_RID)
    return r if len(r) <= MAX_RID and r.isprintable() else printable(r, MAX_RID)


def rid_texts(rids: list[Any]) -> list[str]:
    """``rid_text`` of each; checked when a step is shown, not on the ingest path, where nothing
    per request runs."""
    # The common case at C speed (every rid a short printable string): one join, one scan, one
    # map of len; the per-rid checks only for a list that fails it.
    try:
        ok = "".join(rids).isprintable() and max(map(len, rids), default=0) <= MAX_RID
    except TypeError:  # a rid that is no string
        ok = False
    return list(rids) if ok else [rid_text(r) for r in rids]


def step_view(ev: Event) -> StepView:
    """One step event, checked in full; raises DecodeError naming the bad key."""
    b = ev.body
    n, acc, carried = step_columns(b)
    batch = len(b["rids"])
    if batch and (acc.min() < 0 or acc.max() >= max(n, 1)):
        raise DecodeError(f"step 'accepted' out of range [0, {n - 1}]")
    want = int(acc.sum()) + batch * BONUS
    if carried != want:
        raise DecodeError(f"step 'tokens' has {carried} values, expected {want}")
    parents = b.get("parents")
    depths = None
    if parents is not None and batch:
        depths = row_depths(np.frombuffer(parents, dtype=TOKEN_DTYPE).reshape(batch, n))
        over = np.flatnonzero(acc > depths)
        if over.size:
            i = int(over[0])
            raise DecodeError(
                f"step 'accepted' {int(acc[i])} in row {i} is more than the {int(depths[i])} drafts "
                "its tree proposed"
            )
    dt = b.get("dt", 0.0)
    return StepView(
        step=b.get("step", 0),
        batch=batch,
        n=n,
        topk=b.get("topk", 1),
        raw_rids=b["rids"],
        draft=np.frombuffer(b["draft"], dtype=TOKEN_DTYPE).reshape(batch, n),
        parents=None if parents is None else np.frombuffer(parents, dtype=TOKEN_DTYPE).reshape(batch, n),
        accepted=acc,
        tokens=np.frombuffer(b["tokens"], dtype=TOKEN_DTYPE),
        dt=float(dt) if type(dt) in (int, float) and math.isfinite(dt) else 0.0,
        discarded=b.get("discarded", 0),
        depths=depths,
    )
