"""Preflight: what an SGLang server will do with a target and an EAGLE-3 draft, predicted from their
config files and SGLang's rules, before any GPU is spent.

The prediction is a hello, the one the plugin would publish from the live server: the ids SGLang
reads (only ``eagle_config.eagle_aux_hidden_state_layer_ids``) or misses, the layers its target
captures and in which order (``tracer.layers``), the aux width against the draft's ``fc`` (from the
draft's safetensors header, else its config), the flags it rewrites (``tracer.sglang_spec``) and the
release's known defects for this target (``tracer.sglang_releases``). The findings engine then
judges that hello as it judges a live one, so ``preflight`` and ``check`` speak the same codes.

Reads JSON and a safetensors header only: no torch, no sglang import.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from . import layers
from .schema import SpecConfig
from .schema.hello import Hello, Rewrite
from .sglang_spec import SpecArgs, eagle_config_as_read, resolve_spec_args
from .wiring import SpecReport, draft_config_as_written, draft_layer_ids, wiring_report

MAX_HEADER_BYTES = 16 << 20  # safetensors' own limit is 100 MB; a draft's header is a few KiB


class PreflightError(Exception):
    """A file that cannot be read as what it should be; one line."""


@dataclass(frozen=True)
class Prediction:
    hello: Hello
    sglang_version: str | None
    version_source: str  # "--sglang-version", "installed", or "none: the rules of the newest release"
    fc_source: str  # where the draft's fc width came from
    notes: tuple[str, ...] = ()


def read_config(directory: str, what: str) -> dict[str, Any]:
    """A model directory's config.json, read as bounded, strict JSON; one line when it is not."""
    from .analysis.manifest import ManifestError, read_json

    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise PreflightError(f"{what} {directory}: no config.json (is it a model directory?)")
    try:
        return read_json(path, f"{what} config")
    except ManifestError as exc:
        raise PreflightError(str(exc)) from None


def safetensors_shapes(directory: str) -> dict[str, list[int]]:
    """Tensor shapes from the headers of the directory's ``*.safetensors`` files (8-byte length,
    then JSON), without reading the tensors; empty when there are none."""
    shapes: dict[str, list[int]] = {}
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    except OSError:
        return shapes
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                head = f.read(8)
                if len(head) != 8:
                    raise PreflightError(f"{path}: truncated safetensors header")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER_BYTES:
                    raise PreflightError(f"{path}: safetensors header of {n} bytes, not a model file")
                header = json.loads(f.read(n))
        except OSError as exc:
            raise PreflightError(f"{path}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise PreflightError(f"{path}: unreadable safetensors header ({exc})") from None
        if not isinstance(header, dict):
            raise PreflightError(f"{path}: unreadable safetensors header")
        for key, info in header.items():
            if isinstance(info, dict) and isinstance(info.get("shape"), list):
                shapes[key] = [int(v) for v in info["shape"] if isinstance(v, int)]
    return shapes


def draft_fc_width(draft_dir: str, dcfg: dict[str, Any], ids: list[int] | None) -> tuple[int | None, str]:
    """The input width of the draft's ``fc``: its weight's shape in the draft's safetensors, else
    what SGLang's draft sizes it from (``target_hidden_size`` or ``hidden_size`` × the number of
    ids, 3 without ids)."""
    for key, shape in safetensors_shapes(draft_dir).items():
        if key.split(".")[-2:] == ["fc", "weight"] and len(shape) == 2:
            return shape[1], f"{key} in the draft's safetensors"
    hidden = dcfg.get("target_hidden_size") or dcfg.get("hidden_size")
    if type(hidden) is not int:
        return None, "unknown: no fc weight and no hidden size in the draft's config"
    n = len(ids) if ids else 3
    return hidden * n, f"the draft config: {hidden} × {n} slots"


def _sglang_ids(dcfg: dict[str, Any]) -> tuple[bool, list[int] | None]:
    """``(use_aux_hidden_state, ids)`` as SGLang reads them (``eagle_config_as_read``), the ids
    kept only when they are a list of integers the layer rules can place."""
    use_aux, _ = eagle_config_as_read(dcfg)
    ids, where = draft_layer_ids(dcfg)
    return use_aux, ids if where == "eagle_config" else None


def installed_sglang() -> str | None:
    """The installed SGLang's version, from its package metadata (nothing of it is imported)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def predict(
    target_dir: str,
    draft_dir: str,
    requested: SpecArgs,
    sglang_version: str | None = None,
) -> Prediction:
    """The hello an SGLang server of ``sglang_version`` (default: the installed one) would publish
    for this target, draft and speculative flags."""
    tcfg = read_config(target_dir, "--model-path")
    dcfg = draft_config_as_written(draft_dir)
    if not dcfg:
        dcfg = read_config(draft_dir, "--speculative-draft-model-path")  # says why it is unreadable
    version: str | None = sglang_version
    vsrc = "--sglang-version"
    if version is None:
        version = installed_sglang()
        vsrc = (
            "installed" if version is not None else "none given or installed: the rules of the newest release"
        )
    archs = tcfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    n_layers = tcfg.get("num_hidden_layers")
    n_layers = n_layers if type(n_layers) is int and n_layers > 0 else None
    try:
        effective, rewrites = resolve_spec_args(requested, arch)
    except ValueError as exc:
        raise PreflightError(str(exc)) from None
    use_aux, ids = _sglang_ids(dcfg)
    family = layers.family_of(arch=arch)
    notes: list[str] = []
    native: list[int] | None = None
    if n_layers is None:
        notes.append("the target config has no num_hidden_layers: the captured layers cannot be predicted")
    elif use_aux:
        native = layers.native_from_ids(family, ids, n_layers)
    fc_in, fc_src = draft_fc_width(draft_dir, dcfg, ids)
    target = SimpleNamespace(
        config=SimpleNamespace(**{k: v for k, v in tcfg.items() if isinstance(k, str) and k.isidentifier()}),
        model=SimpleNamespace(layers_to_capture=native or [], layers=[], capture_aux_hidden_states=use_aux),
    )
    draft = SimpleNamespace(model=SimpleNamespace(fc=SimpleNamespace(in_features=fc_in)))

    def spec(s: SpecArgs) -> SpecConfig:
        return SpecConfig(s.algorithm, s.num_steps, s.topk, s.num_draft_tokens)

    hello = wiring_report(
        engine="sglang",
        engine_version=version,
        target_model=target,
        draft_model=draft,
        target_path=target_dir,
        draft_path=draft_dir,
        spec=SpecReport(spec(requested), spec(effective), tuple(map(Rewrite.from_body, rewrites))),
        use_aux_hidden_state=use_aux,
        ids_read=ids,
        target_arch=arch,
    )
    return Prediction(hello, version, vsrc, fc_src, tuple(notes))
