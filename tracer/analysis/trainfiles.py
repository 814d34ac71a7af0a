"""Readers for what EAGLE-3 training leaves behind. Every load is ``weights_only=True``.

Formats:
- SpecForge hidden states: ``rows_*/data_{i}.ckpt`` (or ``.ckpt.gz``, a gzip stream), a dict with
  ``input_ids`` [S], ``loss_mask`` [S], ``hidden_state`` [1, S, H] (final-norm teacher) and
  ``aux_hidden_state`` [1, S, K*H] (the captured layers, concatenated).
- The older dict format ``{"input_ids": [S], "hidden_states": [tensor, ...]}``: one tensor per aux
  layer, concatenated here in list order.
- SpecForge's vocabulary mapping ``{"d2t": [draft_vocab] offsets, "t2d": [vocab] bool}``.

Rows are right-padded with 0 to the longest row of their batch (SpecForge stores no length);
real tokens are found from ``loss_mask`` / ``input_ids`` (the padding tail is dropped).
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from eagle3_top.tracer.files import FileProblem, open_regular

SUFFIXES = (".ckpt", ".ckpt.gz", ".pt")
MAX_TOKEN_ID = (1 << 31) - 1


class TrainFileError(ValueError):
    """One line: which file and what is wrong with it."""


@dataclass
class TrainingSample:
    path: str
    fmt: str  # "specforge" | "legacy"
    input_ids: np.ndarray  # [S] int64, padding tail removed
    loss_mask: np.ndarray | None  # [S]
    aux: Any  # torch.Tensor [S, K*H], in the file's dtype
    slots: int | None  # K when the format says (legacy: number of tensors); None = infer from width


def find_training_files(root: str) -> list[str]:
    """All hidden-state files under ``root``, sorted the way SpecForge's reader sorts them."""
    if os.path.isfile(root):
        return [root]
    if not os.path.isdir(root):
        raise TrainFileError(f"{root}: no such file or directory")
    found = []
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) == "vocab_mapping":
            continue
        for name in files:
            if name.endswith(SUFFIXES) and name != "vocab_mapping.pt":
                found.append(os.path.join(dirpath, name))
    return sorted(found, key=_natural_key)


def _natural_key(path: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def torch_load(path: str) -> Any:
    """``torch.load(weights_only=True)``, through gzip for ``.gz``; every failure becomes one
    TrainFileError line of ours. Torch's own text is not passed on: for a refused file it advises
    ``weights_only=False``, which would run whatever the file's pickle says."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's pickle-protocol chatter is not the user's problem
            return _torch_load(torch, path)
    except TrainFileError:
        raise
    except FileProblem as exc:  # a FIFO, a device, a link loop: already one line
        raise TrainFileError(str(exc)) from None
    except pickle.UnpicklingError as exc:
        raise TrainFileError(
            f"{path}: refused to unpickle (not a plain tensor dict): {_refusal(exc)}"
        ) from None
    except MemoryError:
        raise TrainFileError(
            f"{path}: not a readable torch file: too large for this machine's memory"
        ) from None
    except Exception as exc:  # torch's readers raise anything (KeyError, struct.error, ...) on a corrupt file
        raise TrainFileError(f"{path}: not a readable torch file: {_reason(exc)}") from None


def _refusal(exc: BaseException) -> str:
    """Why the weights-only unpickler stopped, in our words."""
    text = str(exc)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it references {found.group(1)}, which a weights-only load does not run"
    if re.search(r"Unsupported operand|opcode", text):
        return "not a torch file (its bytes are not a tensor pickle)"
    return "it holds objects other than tensors and plain containers"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if not line or re.search(r"weights_only|safe_globals|trust", line):
        return type(exc).__name__
    return f"{type(exc).__name__}: {line[:200]}" if isinstance(exc, (KeyError, IndexError)) else line[:200]


# Torch's two containers: a zip archive (the default since 1.6) and the legacy bare pickle.
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80


def _sniff(path: str, head: bytes) -> None:
    if not head:
        raise TrainFileError(f"{path}: empty file, expected a torch file")
    if not head.startswith(_ZIP_MAGIC) and head[0] != _PICKLE_PROTO:
        raise TrainFileError(f"{path}: not a torch file (neither torch's zip container nor a pickle)")


def _torch_load(torch: Any, path: str) -> Any:
    if path.endswith(".gz"):
        with open_regular(path) as raw, gzip.GzipFile(fileobj=raw) as f:
            data = io.BytesIO(f.read())
        _sniff(path, data.getvalue()[:4])
        return torch.load(data, map_location="cpu", weights_only=True)
    with open_regular(path) as f:  # a FIFO or a device would hang torch's reader
        head = f.read(4)
    _sniff(path, head)
    # mmap spares a copy; only the zip container supports it
    return torch.load(path, map_location="cpu", weights_only=True, mmap=head.startswith(_ZIP_MAGIC))


def _tensor(path: str, data: dict[str, Any], key: str, kind: str = "any") -> Any:
    """``data[key]``, a dense CPU tensor of ``kind``: "ids" (integers), "rows" (floating point)."""
    import torch

    val = data.get(key)
    if not isinstance(val, torch.Tensor):
        raise TrainFileError(f"{path}: '{key}' is {type(val).__name__}, expected a tensor")
    if val.layout != torch.strided or val.is_quantized or val.is_complex():
        raise TrainFileError(
            f"{path}: '{key}' is a {val.layout} {val.dtype} tensor, expected a dense real one"
        )
    if kind == "ids" and (val.is_floating_point() or val.dtype == torch.bool):
        raise TrainFileError(f"{path}: '{key}' is a {val.dtype} tensor, expected integer token ids")
    if kind == "rows" and not val.is_floating_point():
        raise TrainFileError(
            f"{path}: '{key}' is a {val.dtype} tensor, expected floating-point hidden states"
        )
    return val


def _ids(path: str, data: dict[str, Any]) -> np.ndarray:
    ids = _tensor(path, data, "input_ids", "ids").reshape(-1).long().numpy()
    if ids.size and (ids.min() < 0 or ids.max() > MAX_TOKEN_ID):
        raise TrainFileError(f"{path}: input_ids hold {int(ids.min())} .. {int(ids.max())}, not token ids")
    return ids


def _mask(path: str, data: dict[str, Any], n: int) -> np.ndarray | None:
    if data.get("loss_mask") is None:
        return None
    mask = _tensor(path, data, "loss_mask").reshape(-1)
    if mask.shape[0] != n:
        raise TrainFileError(f"{path}: loss_mask has {mask.shape[0]} positions, input_ids {n}")
    return mask.ne(0).numpy()


def _real_length(input_ids: np.ndarray, loss_mask: np.ndarray | None) -> int:
    """Length without the right padding: up to the last non-zero id or mask position."""
    nz = np.nonzero(input_ids)[0]
    end = int(nz[-1]) + 1 if nz.size else 0
    if loss_mask is not None:
        nzm = np.nonzero(loss_mask)[0]
        if nzm.size:
            end = max(end, int(nzm[-1]) + 1)
    return end


def parse_sample(path: str, data: Any) -> TrainingSample:
    if not isinstance(data, dict):
        raise TrainFileError(f"{path}: top level is {type(data).__name__}, expected a dict of tensors")
    try:
        return _parse_sample(path, data)
    except TrainFileError:
        raise
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        # a tensor whose shape or storage no reshape accepts: the checks above missed a case
        raise TrainFileError(f"{path}: unexpected contents: {type(exc).__name__}: {_reason(exc)}") from None


def _parse_sample(path: str, data: dict[str, Any]) -> TrainingSample:
    if "aux_hidden_state" in data:
        ids = _ids(path, data)
        mask = _mask(path, data, ids.shape[0])
        aux = _tensor(path, data, "aux_hidden_state", "rows")
        if aux.dim() == 0 or aux.shape[-1] == 0:
            raise TrainFileError(f"{path}: aux_hidden_state {tuple(aux.shape)} has no columns")
        aux = aux.reshape(-1, aux.shape[-1]) if aux.dim() == 3 else aux
        if aux.dim() != 2 or aux.shape[0] != ids.shape[0]:
            raise TrainFileError(
                f"{path}: aux_hidden_state {tuple(aux.shape)} does not match input_ids length {ids.shape[0]}"
            )
        n = _real_length(ids, mask)
        return TrainingSample(path, "specforge", ids[:n], None if mask is None else mask[:n], aux[:n], None)
    if "hidden_states" in data:
        import torch

        ids = _ids(path, data)
        hs = data["hidden_states"]
        if not isinstance(hs, (list, tuple)) or not hs:
            raise TrainFileError(f"{path}: 'hidden_states' must be a non-empty list of tensors")
        parts = []
        for i, t in enumerate(hs):
            t = _tensor(path, {f"hidden_states[{i}]": t}, f"hidden_states[{i}]", "rows")
            if t.dim() == 0 or t.shape[-1] == 0:
                raise TrainFileError(f"{path}: hidden_states[{i}] {tuple(t.shape)} has no hidden dimension")
            parts.append(t.reshape(-1, t.shape[-1]))
        if len({p.shape for p in parts}) != 1 or parts[0].shape[0] != ids.shape[0]:
            raise TrainFileError(f"{path}: hidden_states shapes {[tuple(p.shape) for p in parts]} disagree")
        if len({p.dtype for p in parts}) != 1:
            raise TrainFileError(
                f"{path}: hidden_states dtypes {sorted({str(p.dtype) for p in parts})} differ"
            )
        mask = _mask(path, data, ids.shape[0])
        n = _real_length(ids, mask)
        return TrainingSample(
            path, "legacy", ids[:n], None if mask is None else mask[:n], torch.cat(parts, -1)[:n], len(parts)
        )
    keys = ", ".join(sorted(map(str, data)))[:120]
    raise TrainFileError(
        f"{path}: not a hidden-state file (keys: {keys}); expected SpecForge's "
        "input_ids/loss_mask/hidden_state/aux_hidden_state or {input_ids, hidden_states: [...]}"
    )


def load_sample(path: str) -> TrainingSample:
    return parse_sample(path, torch_load(path))


@dataclass
class VocabMapping:
    d2t: np.ndarray  # [draft_vocab] offsets: target = draft + d2t[draft]
    t2d: np.ndarray | None  # [vocab] bool

    @property
    def hot_token_id(self) -> np.ndarray:
        return self.d2t + np.arange(self.d2t.shape[0])


def load_vocab_mapping(path: str) -> VocabMapping:
    data = torch_load(path)
    if not isinstance(data, dict) or "d2t" not in data:
        raise TrainFileError(f"{path}: expected a dict with 'd2t' (and 't2d')")
    raw = data["d2t"]
    if isinstance(raw, list) and all(type(v) is int and abs(v) < 1 << 62 for v in raw):  # a hand-written map
        d2t = np.asarray(raw, dtype=np.int64)
    else:
        d2t = _tensor(path, data, "d2t", "ids").reshape(-1).long().numpy()
    t2d = None
    if data.get("t2d") is not None:
        t2d = _tensor(path, data, "t2d").reshape(-1).ne(0).numpy()
    return VocabMapping(d2t, t2d)
