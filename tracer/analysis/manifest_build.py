"""Building the training manifest from what training left behind.

Inputs: the draft's config.json (``eagle_config``), SpecForge's hidden-state files (``data_*.ckpt``,
``.ckpt.gz``) or the older ``{input_ids, hidden_states: [...]}`` files, the target's config, the
vocabulary mapping and the training metrics. Every file is read with ``torch.load(weights_only=True)``
(``trainfiles``): no pickle runs. The reference fingerprints come from the same function the tracer
uses (``tracer.fingerprint``), so live and training numbers compare number for number.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from eagle3_top.tracer import __version__
from eagle3_top.tracer.analysis.manifest import (
    MAX_LAYERS,
    MAX_PROBES,
    MAX_SIZE,
    MAX_SLOTS,
    AuxLayers,
    DraftInfo,
    Fields,
    Manifest,
    ManifestError,
    ProbeSample,
    Reference,
    TargetInfo,
    TrainingMetrics,
    pack_rows,
    read_json,
)
from eagle3_top.tracer.analysis.trainfiles import (
    TrainFileError,
    find_training_files,
    load_sample,
    load_vocab_mapping,
    torch_load,
)
from eagle3_top.tracer.engines.base import declared_ids
from eagle3_top.tracer.serving.claims import metrics_from_json
from eagle3_top.tracer.serving.fingerprint import FingerprintAccumulator, fingerprint
from eagle3_top.tracer.serving.wiring import d2t_summary


def specforge_default_ids(num_layers: int) -> list[int]:
    """SpecForge's default capture layers, canonical: ``[1, n//2 - 1, n - 4]``."""
    return [1, num_layers // 2 - 1, num_layers - 4]


def _config_path(path: str) -> str:
    return os.path.join(path, "config.json") if os.path.isdir(path) else path


def _arch(c: Fields, cfg: dict[str, Any]) -> str | None:
    archs = cfg.get("architectures")
    if archs is None:
        return None
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        c.expected("architectures", "a list of strings", archs)
    return archs[0] if archs else None


def _flag(c: Fields, v: Any, where: str, default: bool) -> bool:
    c.flag(v, where)
    return default if v is None else bool(v)


def _size(c: Fields, cfg: dict[str, Any], key: str) -> int | None:
    return c.opt_integer(cfg.get(key), key, 1, MAX_SIZE)


def _finite_tree(v: Any) -> bool:
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return False
        if isinstance(x, (dict, list)):
            stack.extend(x.values() if isinstance(x, dict) else x)
    return True


def _draft_flags(cfg: dict[str, Any], path: str) -> dict[str, Any]:
    """What the manifest keeps of the draft config; ManifestError (one line naming the key) for a
    key of the wrong type: a hostile or broken config must not become a manifest nobody can load."""
    c = Fields(path)
    ec = c.obj(cfg.get("eagle_config"), "eagle_config")
    if not _finite_tree(ec):
        c.fail("eagle_config", "holds a number that is not finite (NaN or Infinity)")
    for where, ids in (
        ("eagle_config.eagle_aux_hidden_state_layer_ids", ec.get("eagle_aux_hidden_state_layer_ids")),
        ("eagle_aux_hidden_state_layer_ids", cfg.get("eagle_aux_hidden_state_layer_ids")),
    ):
        if ids is not None:
            c.integers(ids, where, -1, MAX_LAYERS - 1, MAX_SLOTS, min_len=1)
    norm_before_fc = _flag(c, cfg.get("norm_before_fc"), "norm_before_fc", False)
    fc_norm = _flag(c, cfg.get("fc_norm"), "fc_norm", False)
    use_aux_norm = _flag(c, cfg.get("use_aux_norm"), "use_aux_norm", False)
    return {
        "arch": _arch(c, cfg),
        "hidden_size": _size(c, cfg, "hidden_size"),
        "target_hidden_size": _size(c, cfg, "target_hidden_size"),
        "vocab_size": _size(c, cfg, "vocab_size"),
        "draft_vocab_size": _size(c, cfg, "draft_vocab_size"),
        "norm_before_fc": _flag(c, ec.get("norm_before_fc"), "eagle_config.norm_before_fc", norm_before_fc),
        "fc_norm": fc_norm or use_aux_norm,
        "use_aux_hidden_state": _flag(
            c, ec.get("use_aux_hidden_state"), "eagle_config.use_aux_hidden_state", True
        ),
        "eagle_config": ec or None,
    }


def _target_fields(cfg: dict[str, Any], path: str) -> dict[str, Any]:
    c = Fields(path)
    return {
        "arch": _arch(c, cfg),
        "num_layers": c.opt_integer(cfg.get("num_hidden_layers"), "num_hidden_layers", 1, MAX_LAYERS),
        "hidden_size": _size(c, cfg, "hidden_size"),
        "vocab_size": _size(c, cfg, "vocab_size"),
    }


def _d2t_of(path: str, v: Any) -> np.ndarray:
    import torch

    if (
        not isinstance(v, torch.Tensor)
        or v.is_floating_point()
        or v.is_complex()
        or v.layout != torch.strided
    ):
        raise TrainFileError(f"{path}: its d2t is not a dense integer tensor")
    return np.asarray(v.reshape(-1).long().numpy())


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
                if isinstance(k, str) and k.endswith("d2t"):
                    return _d2t_of(pt, v), pt
    st = os.path.join(draft_dir, "model.safetensors")
    if os.path.exists(st):
        try:
            from safetensors import safe_open
        except ImportError:
            return None, None
        try:  # only the d2t tensor is read: a draft's weights may be gigabytes
            with safe_open(st, framework="np") as f:
                for k in f.keys():
                    if k.endswith("d2t"):
                        return np.asarray(f.get_tensor(k), dtype=np.int64).reshape(-1), st
        except Exception as exc:  # safetensors' own error type, or numpy's on a bad dtype
            raise TrainFileError(f"{st}: not a readable safetensors file: {exc}") from None
    return None, None


def read_training_metrics(path: str) -> TrainingMetrics:
    """Per-position accuracy and simulated accept length from a metrics JSON, in any of the
    spellings SpecForge and EAGLE use: ``acc_i`` / ``train/acc_i`` / ``eval/acceptance_rate_i``
    keys, or lists under ``per_position_acc`` / ``acc``. Accuracies must lie in [0, 1]."""
    data = read_json(path, "training metrics")
    try:
        acc, sim = metrics_from_json(data, Fields(path).number)
    except ManifestError:
        raise
    except ValueError as exc:  # plain checks of the shared reader (a list too long, say)
        raise ManifestError(f"{path}: {exc}") from None
    if not acc and sim is None:
        raise ManifestError(f"{path}: no per-position accuracy (acc_i) or simulated_acc_len found")
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
    flags = _draft_flags(dcfg, _config_path(draft_dir))
    target: dict[str, Any] = {}
    if target_config:
        target = _target_fields(read_json(target_config, "target config.json"), _config_path(target_config))
    ids, where = declared_ids(dcfg)
    num_layers = target.get("num_layers")
    ids_source = where
    if ids is None:
        if num_layers is None:
            raise ManifestError(
                f"{draft_dir}: the draft config lists no eagle_aux_hidden_state_layer_ids; "
                "give --target-config (with num_hidden_layers) so SpecForge's default layers can be assumed"
            )
        ids, ids_source = specforge_default_ids(num_layers), "specforge_default"
        if min(ids) < -1:
            raise ManifestError(
                f"{_config_path(target_config or '')}: num_hidden_layers {num_layers} is too few for "
                f"SpecForge's default layers {ids}; list the ids in the draft config"
            )
    if concat_order not in ("ascending", "list"):
        raise ManifestError(f"concat order {concat_order!r}: expected 'ascending' or 'list'")
    if not 0 <= probes <= MAX_PROBES:
        raise ManifestError(f"probes {probes}: expected 0 to {MAX_PROBES}")
    if max_files is not None and max_files < 1:
        raise ManifestError(f"max files {max_files}: expected at least 1")
    order = sorted(set(ids)) if concat_order == "ascending" else list(ids)
    # the small inputs first: a bad one must not surface after an hour of reading training files
    training = read_training_metrics(metrics) if metrics else None
    d2t, d2t_src = _find_d2t(draft_dir, vocab_mapping)
    if d2t is not None and d2t.size and int(np.abs(d2t).max()) > MAX_SIZE:
        raise TrainFileError(f"{d2t_src}: d2t offsets reach {int(np.abs(d2t).max())}: not a vocabulary map")

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
                hidden = target.get("hidden_size") or flags["target_hidden_size"] or flags["hidden_size"]
                if hidden and hidden != width:
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

    vocab = target.get("vocab_size") or flags["vocab_size"]
    assert width is not None  # set by the first file; acc.rows > 0 means there was one
    return Manifest(
        path="",
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        builder=f"eagle3-top {__version__}",
        target=TargetInfo(
            arch=target.get("arch"),
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
        training=training,
    )
