"""Building the training manifest from what training left behind.

Inputs: the draft's config.json (``eagle_config``), SpecForge's hidden-state files (``data_*.ckpt``,
``.ckpt.gz``) or the older ``{input_ids, hidden_states: [...]}`` files, the target's config, the
vocabulary mapping and the training metrics. Every file is read with ``torch.load(weights_only=True)``
(``trainfiles``): no pickle runs. The reference fingerprints come from the same function the tracer
uses (``tracer.fingerprint``), so live and training numbers compare number for number.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from eagle3_top.tracer import __version__
from eagle3_top.tracer.fingerprint import FingerprintAccumulator, fingerprint
from eagle3_top.tracer.wiring import d2t_summary, draft_layer_ids

from .manifest import (
    AuxLayers,
    DraftInfo,
    Manifest,
    ManifestError,
    ProbeSample,
    Reference,
    TargetInfo,
    TrainingMetrics,
    pack_rows,
    read_json,
)
from .trainfiles import TrainFileError, find_training_files, load_sample, load_vocab_mapping, torch_load


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
        "eagle_config": ec or None,
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


def read_training_metrics(path: str) -> TrainingMetrics:
    """Per-position accuracy and simulated accept length from a metrics JSON, in any of the
    spellings SpecForge and EAGLE use: ``acc_i`` / ``train/acc_i`` / ``eval/acceptance_rate_i``
    keys, or lists under ``per_position_acc`` / ``acc``."""
    data = read_json(path, "training metrics")
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
    return TrainingMetrics(acc, sim, os.path.abspath(path))


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
) -> Manifest:
    """Build the manifest; raises ManifestError / TrainFileError with a one-line reason."""
    dcfg = read_json(draft_dir, "draft config.json")
    flags = _draft_flags(dcfg)
    tcfg = read_json(target_config, "target config.json") if target_config else None
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
    probe_list: list[ProbeSample] = []
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
                    ProbeSample(
                        os.path.relpath(path, data) if os.path.isdir(data) else path,
                        sample.input_ids[:n].tolist(),
                        pack_rows(sample.aux[:n]),
                    )
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
    assert width is not None  # set by the first file; acc.rows > 0 means there was one
    return Manifest(
        path="",
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        builder=f"eagle3-top {__version__}",
        target=TargetInfo(
            arch=((tcfg or {}).get("architectures") or [None])[0],
            num_layers=num_layers,
            hidden_size=width,
            vocab_size=vocab,
            config=os.path.abspath(target_config) if target_config else None,
        ),
        draft=DraftInfo(**flags, path=os.path.abspath(draft_dir), ids_location=where),
        aux=AuxLayers(
            layer_ids=ids,
            concat_order=order,
            slot_width=width,
            ids_source=ids_source,
            concat_order_rule=concat_order,
        ),
        reference=Reference(acc.fingerprint(), files=len(files), tokens=tokens, data=os.path.abspath(data)),
        probes=tuple(probe_list),
        vocab=None if d2t is None else d2t_summary(d2t, vocab),
        vocab_source=d2t_src,
        training=read_training_metrics(metrics) if metrics else None,
    )
