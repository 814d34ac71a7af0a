"""SGLang on a CPU, as its server would set a target up, step by step: the process prepared
(stand-ins for the GPU-only packages, the CPU kernel emulation, a one-process gloo world,
torch.compile off), ServerArgs from a launcher command line (``prepare_server_args``), the ids
SGLang reads (``resolve_spec_aux_hidden_state_config``), the target class as the model registry
resolves ``architectures[0]`` (``_initialize_model``) with random weights (seeded normal, never
zeros), the capture set as the model runner sets it (``configure_aux_hidden_state_capture`` ->
``set_eagle3_layers_to_capture``), the decoder stack holding the capture loop, and one EXTEND
forward batch with the stand-in attention backend."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

from eagle3_top.hooks.sglang.observe.configs import REMOTE_CODE_CONFIGS
from eagle3_top.hooks.sglang.observe.errors import _READY
from eagle3_top.hooks.sglang.observe.shrink import DTYPE

PROMPT_LEN = 7
SEED = 0


def _prepare_process(quiet: bool) -> str:
    """Stand-ins, CPU kernels, a one-process gloo world, torch.compile off; SGLang's version."""
    if "version" in _READY:
        return str(_READY["version"])
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    from eagle3_top.hooks.sglang import cpu_emulation, cpu_standins

    cpu_standins.install_standins()
    import torch

    torch._dynamo.config.disable = True  # SGLang's @torch.compile helpers run eager
    if quiet:
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
    import sglang

    cpu_emulation.install()
    cpu_standins.init_process_group()
    _register_remote_code_configs()
    _READY["version"] = sglang.__version__
    return str(sglang.__version__)


def _register_remote_code_configs() -> None:
    """A plain config class for each ``REMOTE_CODE_CONFIGS`` type transformers does not know (the
    checkpoint's own class is remote code, absent here): every field kept as written."""
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for model_type in REMOTE_CODE_CONFIGS:
        if model_type in CONFIG_MAPPING:
            continue
        cls = type(f"RemoteCodeConfig_{model_type}", (PretrainedConfig,), {"model_type": model_type})
        AutoConfig.register(model_type, cls)


def _launcher_argv(tdir: str, ddir: str) -> list[str]:
    return [
        "--model-path", tdir,
        "--device", "cpu",
        "--skip-tokenizer-init",
        "--dtype", DTYPE,
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", ddir,
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip


# Serving flags an architecture needs on a CPU that do not touch the capture: SGLang's CPU platform
# refuses the Mamba radix-cache strategy (extra_buffer) it picks for a hybrid model under spec decoding.
_MAMBA_NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
# Gemma 4: 0.5.17 accepts only trtllm_mha / triton / intel_xpu attention and picks intel_amx on a CPU
# (attention runs on the observer's stand-in backend whatever is named; triton is what a GPU may pick).
EXTRA_ARGV: dict[str, list[str]] = {
    "Qwen3NextForCausalLM": _MAMBA_NO_BUFFER,
    "Qwen3_5MoeForConditionalGeneration": _MAMBA_NO_BUFFER,
    "Gemma4ForConditionalGeneration": ["--attention-backend", "triton"],
}


def _server_args(tdir: str, ddir: str, arch: str) -> Any:
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(_launcher_argv(tdir, ddir) + EXTRA_ARGV.get(arch, []))
    if hasattr(sa, "resolve_once"):  # 0.5.22+: resolved on demand
        sa.resolve_once()
    return sa


def _init_dp_attention(sa: Any, mc: Any) -> None:
    """What the model runner does before it builds a model: 0.5.17's layers read the attention
    data-parallel size (0.5.23 derives it from the published context)."""
    from sglang.srt.runtime_context import get_parallel

    try:
        _ = get_parallel().attn_dp_size
    except AssertionError:  # "dp attention not initialized!"
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        initialize_dp_attention(sa, mc)


def _read_ids(sa: Any, mc: Any) -> Any:
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return resolve_spec_aux_hidden_state_config(
        server_args=sa,
        model_config=mc,
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        is_draft_worker=False,
    )


def _build_target(mc: Any) -> Any:
    """The target as SGLang's dummy-weights loader builds it (``--load-format dummy``: the class the
    model registry resolves, ``_initialize_model``, weights set, the model's post-load fix-ups, each
    quant method's ``process_weights_after_loading``), with seeded normal weights instead of its
    near-zero uniform ones."""
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.model_loader import loader
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    with set_default_torch_dtype(mc.dtype), torch.device("cpu"):
        model = loader._initialize_model(mc, LoadConfig())
        _random_init(model)
        post = getattr(loader, "post_load_weights", None) or getattr(loader, "_post_load_weights", None)
        if post is not None:
            post(model)
        elif callable(getattr(model, "post_load_weights", None)):
            model.post_load_weights()
        for _, module in model.named_modules():
            quant_method = getattr(module, "quant_method", None)
            if quant_method is not None and hasattr(quant_method, "process_weights_after_loading"):
                quant_method.process_weights_after_loading(module)
    return model.eval()


def _random_init(model: Any) -> None:
    """Seeded normal weights, never zeros (every layer must leave a distinct stream): matrices
    N(0, 1/fan_in), norm weights 1 + N(0, 0.01), other vectors N(0, 0.01)."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for mod in model.modules():
            is_norm = "norm" in type(mod).__name__.lower()
            for p in mod.parameters(recurse=False):
                if p.numel() == 0 or not p.dtype.is_floating_point:
                    continue
                r = torch.randn(p.shape, generator=g, dtype=torch.float32)
                if p.dim() >= 2:
                    r = r / max(1.0, float(p.shape[-1])) ** 0.5
                elif is_norm:
                    r = 1.0 + 0.1 * r
                else:
                    r = 0.1 * r
                p.copy_(r.to(p.dtype))


def _set_capture(model: Any, aux_cfg: Any) -> None:
    """As the model runner: ``configure_aux_hidden_state_capture`` where the release has it."""
    try:
        from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
            configure_aux_hidden_state_capture,
        )
    except ImportError:
        configure_aux_hidden_state_capture = None
    if configure_aux_hidden_state_capture is None:
        if aux_cfg.eagle_use_aux_hidden_state:
            model.set_eagle3_layers_to_capture(aux_cfg.eagle_aux_hidden_state_layer_ids)
        return
    params = inspect.signature(configure_aux_hidden_state_capture).parameters
    values = {
        "model": model,
        "eagle_use_aux_hidden_state": aux_cfg.eagle_use_aux_hidden_state,
        "eagle_aux_hidden_state_layer_ids": aux_cfg.eagle_aux_hidden_state_layer_ids,
        "dflash_use_aux_hidden_state": getattr(aux_cfg, "dflash_use_aux_hidden_state", False),
        "dflash_target_layer_ids": getattr(aux_cfg, "dflash_target_layer_ids", None),
        "is_dspark": getattr(aux_cfg, "is_dspark", False),
    }
    configure_aux_hidden_state_capture(**{k: v for k, v in values.items() if k in params})


# what a decoder stack calls its token embedding (``word_embeddings``: Ling / Bailing)
_EMBEDDINGS = ("embed_tokens", "word_embeddings")


def _embedding(inner: Any) -> Any:
    return next(getattr(inner, name) for name in _EMBEDDINGS if hasattr(inner, name))


def _inner_model(model: Any) -> Any:
    """The decoder stack holding the capture loop (``model.model``; Llama 4: its language model's)."""
    for path in ("model", "language_model.model", "language_model", "model.language_model"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "layers") and any(hasattr(obj, name) for name in _EMBEDDINGS):
            return obj
    raise AttributeError(f"{type(model).__name__}: no decoder stack with layers and a token embedding")


def _flagged(inner: Any) -> list[int] | None:
    """The layers flagged ``_is_layer_to_capture`` (Qwen2/3-MoE, Qwen3-Next: what their forward
    loop reads), or None for a model that keeps no flags."""
    layers = list(inner.layers)
    if not any(hasattr(layer, "_is_layer_to_capture") for layer in layers) and not _reads_flags(inner):
        return None
    return [i for i, layer in enumerate(layers) if getattr(layer, "_is_layer_to_capture", False)]


def _reads_flags(inner: Any) -> bool:
    """Whether the decoder stack's forward loop reads ``_is_layer_to_capture`` (then an empty
    ``flagged`` means: it captures nothing, whatever ``layers_to_capture`` holds; Qwen3.5 before
    0.5.23 stores EAGLE-3's list where its loop never looks)."""
    try:
        return "_is_layer_to_capture" in inspect.getsource(type(inner).forward)
    except (OSError, TypeError):
        return False


def _native(inner: Any) -> list[int] | None:
    """The capture list as the live adapter reads it from a running server (``layers_to_capture``, else
    the ``_is_layer_to_capture`` flags): the hello's ``capture_native``, so an observation and a live
    hello speak of the same list."""
    from eagle3_top.tracer.serving.wiring import live_capture

    return live_capture(inner).native


def _forward_batch(input_ids: Any) -> Any:
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    n = int(input_ids.shape[0])
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=input_ids,
        req_pool_indices=torch.zeros(1, dtype=torch.int64),
        seq_lens=torch.tensor([n]),
        out_cache_loc=torch.arange(n),
        seq_lens_sum=n,
        positions=torch.arange(n),
        extend_seq_lens=torch.tensor([n]),
        extend_prefix_lens=torch.tensor([0]),
        extend_start_loc=torch.tensor([0]),
        seq_lens_cpu=torch.tensor([n]),
        extend_seq_lens_cpu=[n],
        extend_prefix_lens_cpu=[0],
        extend_num_tokens=n,
    )
    return fb


@contextlib.contextmanager
def _attention(backend: Any, fb: Any) -> Iterator[None]:
    fb.attn_backend = backend
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ImportError:
        yield
        return
    with forward_context(ForwardContext(attn_backend=backend)):
        yield


def _write_models(root: str, name: str, target: dict[str, Any], draft: dict[str, Any]) -> tuple[str, str]:
    tdir, ddir = os.path.join(root, name, "target"), os.path.join(root, name, "draft")
    for path, cfg in ((tdir, target), (ddir, draft)):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    return tdir, ddir
