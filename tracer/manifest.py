"""The training manifest: a small JSON file saying how a draft was trained (DESIGN.md §5).

Built from what training leaves behind (draft config, target config, hidden-state files, vocab
mapping, metrics) by ``build_manifest``; read back by ``load_manifest``, which checks the version
and shape and says in one line which file is wrong and how. Writes are atomic: a failed build
leaves nothing behind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import __version__
from .fingerprint import FingerprintAccumulator, fingerprint
from .trainfiles import TrainFileError, find_training_files, load_sample, load_vocab_mapping

MANIFEST_VERSION = 1
MANIFEST_KEY = "eagle3_top_manifest"


class ManifestError(ValueError):
    """One line: which file and what is wrong."""


# -- reading configs ----------------------------------------------------------------------------


def _read_json(path: str, what: str) -> dict[str, Any]:
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


def draft_layer_ids(cfg: dict[str, Any]) -> tuple[list[int] | None, str]:
    """The aux ids a draft config declares, and where: ``eagle_config``, ``top_level`` or ``missing``."""
    ec = cfg.get("eagle_config")
    if isinstance(ec, dict) and isinstance(ec.get("eagle_aux_hidden_state_layer_ids"), list):
        return [int(v) for v in ec["eagle_aux_hidden_state_layer_ids"]], "eagle_config"
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(top, list):
        return [int(v) for v in top], "top_level"
    return None, "missing"


def specforge_default_ids(num_layers: int) -> list[int]:
    """SpecForge's default capture layers, canonical: ``[1, n//2 - 1, n - 4]``."""
    return [1, num_layers // 2 - 1, num_layers - 4]


def _draft_flags(cfg: dict[str, Any]) -> dict[str, Any]:
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    assert isinstance(ec, dict)
    return {
        "arch": (cfg.get("architectures") or [None])[0],
        "hidden_size": cfg.get("hidden_size"),
        "target_hidden_size": cfg.get("target_hidden_size"),
        "vocab_size": cfg.get("vocab_size"),
        "draft_vocab_size": cfg.get("draft_vocab_size"),
        "norm_before_fc": bool(ec.get("norm_before_fc", cfg.get("norm_before_fc", False))),
        "fc_norm": bool(cfg.get("fc_norm", False) or cfg.get("use_aux_norm", False)),
        "use_aux_hidden_state": bool(ec.get("use_aux_hidden_state", True)),
        "eagle_config": cfg.get("eagle_config"),
    }


def _find_d2t(draft_dir: str, vocab_mapping: str | None) -> tuple[np.ndarray | None, str | None]:
    """d2t from an explicit vocab mapping, or the draft's own weights (model.pt / safetensors)."""
    if vocab_mapping:
        return load_vocab_mapping(vocab_mapping).d2t, vocab_mapping
    for name in ("vocab_mapping.pt", os.path.join("vocab_mapping", "vocab_mapping.pt")):
        path = os.path.join(draft_dir, name)
        if os.path.exists(path):
            return load_vocab_mapping(path).d2t, path
    pt = os.path.join(draft_dir, "model.pt")
    if os.path.exists(pt):
        from .trainfiles import torch_load

        sd = torch_load(pt)
        if isinstance(sd, dict):
            for k, v in sd.items():
                if k.endswith("d2t"):
                    return np.asarray(v.numpy(), dtype=np.int64).reshape(-1), pt
    st = os.path.join(draft_dir, "model.safetensors")
    if os.path.exists(st):
        try:
            from safetensors.numpy import load_file
        except ImportError:
            return None, None
        for k, v in load_file(st).items():
            if k.endswith("d2t"):
                return np.asarray(v, dtype=np.int64).reshape(-1), st
    return None, None


def d2t_summary(d2t: np.ndarray, vocab_size: int | None) -> dict[str, Any]:
    hot = d2t + np.arange(d2t.shape[0])
    return {
        "size": int(d2t.shape[0]),
        "sha256": hashlib.sha256(np.ascontiguousarray(d2t, dtype="<i8").tobytes()).hexdigest()[:16],
        "min_target": int(hot.min()) if hot.size else 0,
        "max_target": int(hot.max()) if hot.size else 0,
        "unique_targets": int(np.unique(hot).size),
        "all_zero": bool(not np.any(d2t)),
        "vocab_size": vocab_size,
    }


def read_training_metrics(path: str) -> dict[str, Any]:
    """Per-position accuracy and simulated accept length from a metrics JSON, in any of the
    spellings SpecForge and EAGLE use: ``acc_i`` / ``train/acc_i`` / ``eval/acceptance_rate_i``
    keys, or lists under ``per_position_acc`` / ``acc``."""
    data = _read_json(path, "training metrics")
    acc: list[float] = []
    for key in ("per_position_acc", "eval/per_position_acc", "acc_per_position", "acc"):
        val = data.get(key)
        if isinstance(val, list) and val and all(isinstance(v, (int, float)) for v in val):
            acc = [float(v) for v in val]
            break
    if not acc:
        for prefix in ("eval/acc_", "train/acc_", "acc_", "eval/acceptance_rate_"):
            found = {}
            for k, v in data.items():
                if k.startswith(prefix) and k[len(prefix) :].isdigit() and isinstance(v, (int, float)):
                    found[int(k[len(prefix) :])] = float(v)
            if found:
                acc = [found[i] for i in sorted(found)]
                break
    sim = None
    for key in ("simulated_acc_len", "eval/simulated_acc_len"):
        if isinstance(data.get(key), (int, float)):
            sim = float(data[key])
    if not acc and sim is None:
        raise ManifestError(f"{path}: no per-position accuracy (acc_i) or simulated_acc_len found")
    if sim is None and acc:
        sim, cum = 0.0, 1.0
        for a in acc:
            cum *= a
            sim += cum
    return {"acc": acc, "simulated_acc_len": sim, "source": os.path.abspath(path)}


# -- probes ------------------------------------------------------------------------------------


def pack_rows(rows: Any) -> dict[str, Any]:
    arr = np.ascontiguousarray(rows.float().numpy().astype("<f2"))
    return {"dtype": "<f2", "shape": list(arr.shape), "b64": base64.b64encode(arr.tobytes()).decode()}


def unpack_rows(packed: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(packed["b64"])
    return np.frombuffer(raw, dtype=packed.get("dtype", "<f2")).reshape(packed["shape"]).astype(np.float32)


# -- build -------------------------------------------------------------------------------------

Progress = Callable[[int, int], None]


def build_manifest(
    *,
    draft_dir: str,
    data: str,
    target_config: str | None = None,
    metrics: str | None = None,
    vocab_mapping: str | None = None,
    concat_order: str = "ascending",
    max_files: int | None = None,
    probes: int = 4,
    probe_tokens: int = 64,
    batch_files: int = 64,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Build the manifest dict; raises ManifestError / TrainFileError with a one-line reason."""
    dcfg = _read_json(draft_dir, "draft config.json")
    flags = _draft_flags(dcfg)
    tcfg = _read_json(target_config, "target config.json") if target_config else None
    ids, where = draft_layer_ids(dcfg)
    num_layers = int(tcfg["num_hidden_layers"]) if tcfg and "num_hidden_layers" in tcfg else None
    ids_source = where
    if ids is None:
        if num_layers is None:
            raise ManifestError(
                f"{draft_dir}: the draft config lists no eagle_aux_hidden_state_layer_ids; "
                "give --target-config so SpecForge's default layers can be assumed"
            )
        ids, ids_source = specforge_default_ids(num_layers), "specforge_default"
    if concat_order not in ("ascending", "list"):
        raise ManifestError(f"concat order {concat_order!r}: expected 'ascending' or 'list'")
    order = sorted(set(ids)) if concat_order == "ascending" else list(ids)

    files = find_training_files(data)
    if not files:
        raise TrainFileError(f"{data}: no training files (*.ckpt, *.ckpt.gz, *.pt) found")
    if max_files is not None and max_files < len(files):
        step = len(files) / max_files
        files = [files[int(i * step)] for i in range(max_files)]

    acc = FingerprintAccumulator()
    probe_list: list[dict[str, Any]] = []
    slots = len(order)
    width: int | None = None
    tokens = 0
    pending: list[Any] = []
    # Reading is the bottleneck; reductions run on a second thread (torch releases the GIL in its
    # kernels), one batch at a time so memory stays bounded to two batches of rows.
    reducer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="manifest-fingerprint")
    inflight: list[Future[None]] = []

    def reduce(batch: list[Any]) -> None:
        import torch

        acc.add(fingerprint(torch.cat(batch, 0), slots, clone=False))

    def flush() -> None:
        while inflight:
            inflight.pop().result()  # re-raises a reduction error here, in the caller
        if pending:
            inflight.append(reducer.submit(reduce, list(pending)))
            pending.clear()

    try:
        for i, path in enumerate(files):
            sample = load_sample(path)
            total = int(sample.aux.shape[-1])
            if sample.slots is not None and sample.slots != slots:
                raise TrainFileError(
                    f"{path}: {sample.slots} hidden-state tensors, but the draft config lists {slots} ids"
                )
            if total % slots:
                raise TrainFileError(f"{path}: aux width {total} is not {slots} slots of equal width ({ids})")
            if width is None:
                width = total // slots
                hidden = (
                    (tcfg or {}).get("hidden_size") or flags["target_hidden_size"] or flags["hidden_size"]
                )
                if hidden and int(hidden) != width:
                    raise TrainFileError(
                        f"{path}: aux width {total} = {slots} x {width}, but the target hidden size is {hidden}"
                    )
            elif total != width * slots:
                raise TrainFileError(f"{path}: aux width {total}, earlier files had {width * slots}")
            if sample.aux.shape[0]:
                pending.append(sample.aux)
                tokens += int(sample.aux.shape[0])
            if len(probe_list) < probes and sample.aux.shape[0] >= 2:
                n = min(probe_tokens, int(sample.aux.shape[0]))
                probe_list.append(
                    {
                        "source": os.path.relpath(path, data) if os.path.isdir(data) else path,
                        "input_ids": sample.input_ids[:n].tolist(),
                        "aux_rows": pack_rows(sample.aux[:n]),
                    }
                )
            if len(pending) >= batch_files:
                flush()
            if progress is not None:
                progress(i + 1, len(files))
        flush()
        flush()  # the last batch: wait for it
    finally:
        reducer.shutdown(cancel_futures=True)
    if acc.rows == 0:
        raise TrainFileError(f"{data}: training files hold no token rows")

    d2t, d2t_src = _find_d2t(draft_dir, vocab_mapping)
    vocab = (tcfg or {}).get("vocab_size") or flags["vocab_size"]
    manifest: dict[str, Any] = {
        MANIFEST_KEY: MANIFEST_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "builder": f"eagle3-top {__version__}",
        "target": {
            "arch": ((tcfg or {}).get("architectures") or [None])[0],
            "num_layers": num_layers,
            "hidden_size": width,
            "vocab_size": vocab,
            "config": os.path.abspath(target_config) if target_config else None,
        },
        "draft": {**flags, "path": os.path.abspath(draft_dir), "ids_location": where},
        "aux": {
            "layer_ids": ids,
            "ids_source": ids_source,
            "concat_order": order,
            "concat_order_rule": concat_order,
            "slots": slots,
            "slot_width": width,
            "convention": "canonical: output of 0-based decoder block k; -1 = embedding output",
        },
        "reference": {
            "files": len(files),
            "tokens": tokens,
            "fingerprint": acc.fields(),
            "data": os.path.abspath(data),
        },
        "probes": probe_list,
        "vocab": None if d2t is None else {**d2t_summary(d2t, vocab), "source": d2t_src},
        "training": read_training_metrics(metrics) if metrics else None,
    }
    return manifest


def write_manifest(manifest: dict[str, Any], path: str) -> None:
    """Atomic: a temporary file in the same directory, then a rename."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- load --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    path: str
    data: dict[str, Any]

    @property
    def concat_order(self) -> list[int]:
        return list(self.data["aux"]["concat_order"])

    @property
    def layer_ids(self) -> list[int]:
        return list(self.data["aux"]["layer_ids"])

    @property
    def slot_width(self) -> int:
        return int(self.data["aux"]["slot_width"])

    @property
    def reference(self) -> dict[str, Any]:
        fp: dict[str, Any] = self.data["reference"]["fingerprint"]
        return fp

    @property
    def training_acc(self) -> list[float]:
        t = self.data.get("training") or {}
        return [float(v) for v in t.get("acc") or []]

    @property
    def probes(self) -> list[dict[str, Any]]:
        return list(self.data.get("probes") or [])

    @property
    def target(self) -> dict[str, Any]:
        t: dict[str, Any] = self.data.get("target") or {}
        return t


def load_manifest(path: str) -> Manifest:
    data = _read_json(path, "manifest") if not os.path.isdir(path) else None
    if data is None:
        raise ManifestError(f"{path}: is a directory, expected a manifest JSON file")
    version = data.get(MANIFEST_KEY)
    if version is None:
        raise ManifestError(f"{path}: not an eagle3-top manifest (no '{MANIFEST_KEY}' key)")
    if version != MANIFEST_VERSION:
        raise ManifestError(
            f"{path}: manifest version {version!r}; this eagle3-top reads version {MANIFEST_VERSION}"
        )
    try:
        aux = data["aux"]
        order = [int(v) for v in aux["concat_order"]]
        int(aux["slot_width"])
        fp = data["reference"]["fingerprint"]
        if len(fp["mean"]) != len(order):
            raise ValueError("reference fingerprint slots != concat_order length")
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{path}: malformed manifest: {exc}") from None
    return Manifest(os.path.abspath(path), data)
