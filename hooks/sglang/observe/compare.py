"""What each aux slot holds. Each returned slot is compared with references recorded by forward
hooks during the same forward (clones taken at hook time): the embedding output (canonical -1) and
each decoder block k's output stream (canonical k: ``hidden + residual`` for a block returning the
pair; for 0.5.22+'s boundary stages, the block's output completed with the residual its stream
holds). A slot ``holds`` the reference it equals (else null), and
``shares_storage_with_later_modified`` says its memory was written in place after the phase
(embedding, block k, final norm) that produced it, by the write log (a ``TorchDispatchMode``):
what the aliasing defect looks like."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eagle3_top.hooks.sglang.observe.harness import _embedding

# a slot "holds" a reference within this fraction of the reference's largest magnitude
HOLDS_TOLERANCE = 0.01


@dataclass
class _Region:
    """The bytes a strided tensor covers in its storage: a span, and the exact bytes on demand
    (a column slice of a packed [T, K*H] buffer interleaves with its neighbours)."""

    ptr: int
    lo: int
    hi: int
    item: int
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    _bytes: frozenset[int] | None = None

    def exact(self) -> frozenset[int]:
        if self._bytes is None:
            import torch

            idx = torch.tensor([self.offset])
            for size, st in zip(self.shape, self.stride, strict=True):
                idx = (idx[:, None] + torch.arange(size)[None, :] * st).reshape(-1)
            starts = idx * self.item
            self._bytes = frozenset((starts[:, None] + torch.arange(self.item)[None, :]).reshape(-1).tolist())
        return self._bytes

    def overlaps(self, other: _Region) -> bool:
        if self.ptr != other.ptr or not (self.lo < other.hi and other.lo < self.hi):
            return False
        return not self.exact().isdisjoint(other.exact())


def _region(t: Any) -> _Region | None:
    import torch

    if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.layout != torch.strided or t.is_meta:
        return None
    item = t.element_size()
    shape = tuple(t.shape)  # torch.Size and stride() hold ints already
    stride = t.stride()
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(shape, stride, strict=True))
    offset = int(t.storage_offset())
    lo = offset * item
    return _Region(t.untyped_storage().data_ptr(), lo, lo + span * item, item, offset, shape, stride)


_ALLOC_OPS = {
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "new_zeros",
}


@dataclass
class _Observation:
    """What the hooks and the write log saw during one forward."""

    refs: dict[int, Any] = field(default_factory=dict)  # canonical id -> clone at hook time
    phase: int = -1  # -1 embedding, k block k, N final norm
    defines: list[tuple[int, _Region]] = field(default_factory=list)  # (phase, region) creations/writes
    writes: list[tuple[int, _Region]] = field(default_factory=list)  # (phase, region) in-place writes
    keep: list[Any] = field(default_factory=list)  # storages held so no address is reused


def _op_plan(func: Any) -> tuple[tuple[tuple[int, str], ...], bool]:
    """What the write log reads of an op, from its schema: the arguments it writes in place (index,
    name), and whether its outputs are fresh memory when nothing was written (not an allocation,
    which holds no values yet, and not a view of an input)."""
    plan = _PLANS.get(func)
    if plan is None:
        schema = func._schema
        writes = tuple(
            (i, a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        )
        fresh = func.overloadpacket.__name__ not in _ALLOC_OPS and not any(
            r.alias_info for r in schema.returns
        )
        plan = _PLANS[func] = (writes, fresh)
    return plan


# An op's schema is fixed: read it once per op, not once per call. A forward through a 94-layer
# target makes some 10,000 calls to a few dozen ops, and the schema walk was a quarter of observing.
_PLANS: dict[Any, tuple[tuple[tuple[int, str], ...], bool]] = {}


def _write_log_mode(obs: _Observation) -> Any:
    """A TorchDispatchMode recording every op's in-place writes and fresh outputs, by phase."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    Tensor = torch.Tensor

    def tensors(val: Any) -> list[Any]:
        if isinstance(val, Tensor):
            return [val]
        return [t for t in tree_flatten(val)[0] if isinstance(t, Tensor)]

    def record(t: Any, into_writes: bool) -> None:
        r = _region(t)
        if r is not None:
            if into_writes:
                obs.writes.append((obs.phase, r))
            obs.defines.append((obs.phase, r))
            obs.keep.append(t.untyped_storage())

    class WriteLog(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            writes, fresh = _op_plan(func)
            written = False
            for i, name in writes:
                for t in tensors(args[i] if i < len(args) else kwargs.get(name)):
                    record(t, True)
                    written = True
            if not written and fresh:
                for t in tensors(out):
                    record(t, False)
            return out

    return WriteLog()


def _stream_of_block_output(output: Any, kwargs: dict[str, Any], args: tuple[Any, ...]) -> Any:
    """A decoder block's output stream. A boundary-stage block (0.5.22+) returns its output (alone,
    or with DeepSeek's top-k indices) and keeps the residual in its forward batch's stream: the
    output completed with that residual (``ResidualStream.snapshot``, which copies). A block of the
    older kind returns ``(hidden, residual, ...)``: ``hidden + residual`` (``hidden`` alone while the
    residual is still None)."""
    import torch

    hidden = output[0] if isinstance(output, tuple) and output else output
    fb = kwargs.get("forward_batch")
    if fb is None:
        fb = next((a for a in args if hasattr(a, "forward_mode")), None)
    stream = getattr(fb, "residual_stream", None)
    if stream is not None and hasattr(stream, "snapshot"):
        return stream.snapshot(hidden)
    if not isinstance(hidden, torch.Tensor):
        raise TypeError(f"block output of type {type(hidden).__name__}: no stream to read")
    if isinstance(output, tuple) and len(output) > 1:
        residual = output[1]
        if isinstance(residual, torch.Tensor) and residual.shape == hidden.shape:
            return hidden + residual
    return hidden.clone()


def _install_hooks(inner: Any, obs: _Observation) -> list[Any]:
    import torch

    handles = []

    def on_embed(_m: Any, _args: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            obs.refs[-1] = output.detach().clone()

    handles.append(_embedding(inner).register_forward_hook(on_embed))
    for k, layer in enumerate(inner.layers):

        def pre(_m: Any, _args: Any, _kw: Any, k: int = k) -> None:
            obs.phase = k

        def post(_m: Any, args: Any, kwargs: Any, output: Any, k: int = k) -> None:
            obs.refs[k] = _stream_of_block_output(output, kwargs, args).detach().clone()

        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(layer.register_forward_hook(post, with_kwargs=True))
    norm = getattr(inner, "norm", None)
    if isinstance(norm, torch.nn.Module):

        def pre_norm(_m: Any, _args: Any) -> None:
            obs.phase = len(inner.layers)

        handles.append(norm.register_forward_pre_hook(pre_norm))
    return handles


def _slots_of(result: Any, hidden_size: int) -> list[Any] | None:
    """The aux slots a decoder stack returned: a list of tensors, or one packed [T, K*H] tensor."""
    import torch

    if not isinstance(result, tuple) or len(result) < 2:
        return []  # no aux returned: nothing captured
    aux = result[1]
    if isinstance(aux, torch.Tensor):
        k = aux.shape[-1] // hidden_size
        return [aux[..., i * hidden_size : (i + 1) * hidden_size] for i in range(k)]
    if isinstance(aux, (list, tuple)):
        return list(aux)
    return None


def _later_modified(slot: Any, obs: _Observation) -> bool:
    r = _region(slot)
    if r is None:
        return False
    phases = [p for p, d in obs.defines if d.overlaps(r)]
    if not phases:
        return False
    born = min(phases)
    return any(p > born and w.overlaps(r) for p, w in obs.writes)


def _compare(slots: list[Any], obs: _Observation, intended: list[int]) -> list[dict[str, Any]]:
    rows = []
    for j, s in enumerate(slots):
        sf = s.detach().float()
        diffs = {
            cid: float((sf - ref.float()).abs().max())
            for cid, ref in obs.refs.items()
            if tuple(ref.shape) == tuple(s.shape)
        }
        holds = None
        if diffs:  # equal up to bfloat16 rounding (in practice bit-equal; distinct layers differ by O(1))
            best = min(diffs, key=lambda c: diffs[c])
            scale = max(1.0, float(obs.refs[best].float().abs().max()))
            if diffs[best] <= HOLDS_TOLERANCE * scale:
                holds = best
        want = intended[j] if j < len(intended) else None
        rows.append(
            {
                "holds": holds,
                "intended": want,
                "max_abs_diff_to_intended": diffs.get(want) if want is not None else None,
                "shares_storage_with_later_modified": _later_modified(s, obs),
            }
        )
    return rows
