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

SUFFIXES = (".ckpt", ".ckpt.gz", ".pt")


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
    """``torch.load(weights_only=True)``, through gzip for ``.gz``; errors become TrainFileError."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's pickle-protocol chatter is not the user's problem
            return _torch_load(torch, path)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        why = next((ln.strip() for ln in text.splitlines() if "Unsupported" in ln or "GLOBAL" in ln), None)
        why = why or (text.strip().splitlines()[0] if text.strip() else type(exc).__name__)
        raise TrainFileError(f"{path}: refused to unpickle (not a plain tensor dict): {why}") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrainFileError(f"{path}: not a readable torch file: {msg}") from None


def _torch_load(torch: Any, path: str) -> Any:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            data = io.BytesIO(f.read())
        return torch.load(data, map_location="cpu", weights_only=True)
    # mmap spares a copy, but only the zip container (torch >= 1.6's default) supports it; the
    # legacy container is rare, so try mmap first rather than sniff every file.
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
    return torch.load(path, map_location="cpu", weights_only=True)


def _tensor(path: str, data: dict[str, Any], key: str) -> Any:
    import torch

    val = data.get(key)
    if not isinstance(val, torch.Tensor):
        raise TrainFileError(f"{path}: '{key}' is {type(val).__name__}, expected a tensor")
    return val


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
    if "aux_hidden_state" in data:
        ids = _tensor(path, data, "input_ids").reshape(-1).numpy().astype(np.int64)
        mask_t = data.get("loss_mask")
        mask = mask_t.reshape(-1).numpy() if mask_t is not None else None
        aux = _tensor(path, data, "aux_hidden_state")
        aux = aux.reshape(-1, aux.shape[-1]) if aux.dim() == 3 else aux
        if aux.dim() != 2 or aux.shape[0] != ids.shape[0]:
            raise TrainFileError(
                f"{path}: aux_hidden_state {tuple(aux.shape)} does not match input_ids length {ids.shape[0]}"
            )
        n = _real_length(ids, mask)
        return TrainingSample(path, "specforge", ids[:n], None if mask is None else mask[:n], aux[:n], None)
    if "hidden_states" in data:
        ids = _tensor(path, data, "input_ids").reshape(-1).numpy().astype(np.int64)
        hs = data["hidden_states"]
        if not isinstance(hs, (list, tuple)) or not hs:
            raise TrainFileError(f"{path}: 'hidden_states' must be a non-empty list of tensors")
        import torch

        parts = []
        for i, t in enumerate(hs):
            if not isinstance(t, torch.Tensor):
                raise TrainFileError(f"{path}: hidden_states[{i}] is {type(t).__name__}, expected a tensor")
            parts.append(t.reshape(-1, t.shape[-1]))
        if len({p.shape for p in parts}) != 1 or parts[0].shape[0] != ids.shape[0]:
            raise TrainFileError(f"{path}: hidden_states shapes {[tuple(p.shape) for p in parts]} disagree")
        mask_t = data.get("loss_mask")
        mask = mask_t.reshape(-1).numpy() if mask_t is not None else None
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
    d2t = np.asarray(data["d2t"].numpy() if hasattr(data["d2t"], "numpy") else data["d2t"], dtype=np.int64)
    t2d = data.get("t2d")
    t2d_np = None if t2d is None else np.asarray(t2d.numpy() if hasattr(t2d, "numpy") else t2d, dtype=bool)
    return VocabMapping(d2t.reshape(-1), None if t2d_np is None else t2d_np.reshape(-1))
