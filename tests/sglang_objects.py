"""SGLang's real objects built on a CPU, for the sglang test children (``tests/test_sglang_*.py``).

Runs only inside a child interpreter that has the GPU-only packages stood in (``sglang_cpu``): the
model directories on disk, ``ServerArgs`` from a launcher command line through SGLang's own
``prepare_server_args``, the real target with its real ``set_eagle3_layers_to_capture``, the real
draft, an ``EAGLEWorkerV2`` holding what our hooks read, and real verify-step objects.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import sglang_cpu

N_LAYERS = 6
HIDDEN = 16
VOCAB = 128
DRAFT_VOCAB = 32

LAYER_CASES: dict[str, dict[str, Any]] = {
    "nested": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}},
    "top_level": {"top": [0, 2, 3]},
    "missing": {},
    "minus_one": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 3]}},
    "out_of_order": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 0, 2]}},
    "duplicated": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 2, 3]}},
    "unreachable": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}},
    "aux_off": {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 3], "use_aux_hidden_state": False}
    },
}


def write_models(root: str, name: str, case: dict[str, Any]) -> tuple[str, str]:
    from transformers import LlamaConfig

    tdir, ddir = os.path.join(root, name, "target"), os.path.join(root, name, "draft")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        architectures=["LlamaForCausalLM"],
    )
    cfg.save_pretrained(tdir)
    d = cfg.to_dict()
    d.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, draft_vocab_size=DRAFT_VOCAB)
    if "eagle_config" in case:
        d["eagle_config"] = case["eagle_config"]
    if "top" in case:
        d["eagle_aux_hidden_state_layer_ids"] = case["top"]
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(d, f)
    return tdir, ddir


def launcher_argv(tdir: str, ddir: str, **spec: int) -> list[str]:
    """The launcher's command line for these models and ``--speculative-*`` flags."""
    argv = ["--model-path", tdir, "--device", "cpu", "--skip-tokenizer-init"]
    argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", ddir]
    for k, v in spec.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return argv


def server_args(tdir: str, ddir: str, **spec: int) -> Any:
    """ServerArgs as SGLang's launcher makes them from its command line (``prepare_server_args``):
    0.5.17 rewrites the record in ``__post_init__``; 0.5.23 resolves it in ``resolve_once``."""
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(launcher_argv(tdir, ddir, **spec))
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    return sa


def sglang_effective(sa: Any, field: str) -> Any:
    """A field's value after SGLang's own resolution, read the way that version keeps it."""
    if hasattr(sa, "resolved_dict"):
        return sa.resolved_dict()[field]
    return getattr(sa, field)  # rewritten in place


def init_dp_attention(sa: Any, mc: Any) -> None:
    """What SGLang's model runner does before it builds a model: 0.5.17's layers read the attention
    data-parallel size when tensor-parallel (0.5.23 derives it from the published context)."""
    from sglang.srt.runtime_context import get_parallel

    try:
        _ = get_parallel().attn_dp_size
    except AssertionError:  # "dp attention not initialized!"
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        initialize_dp_attention(sa, mc)


def sglang_models(sa: Any, ddir: str, rank: int = 0) -> tuple[Any, Any, Any, Any, Any]:
    """SGLang's real id reading and its real target (capture list set as SGLang sets it) and draft,
    built from their configs, weights as initialised: ``(aux config, target, draft, target model
    config, draft model config)``."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.models.llama import LlamaForCausalLM
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from sglang.srt.models.qwen2 import Qwen2ForCausalLM
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sglang_cpu.publish_server_args(sa, rank)
    mc = ModelConfig.from_server_args(sa)
    init_dp_attention(sa, mc)
    aux_cfg = resolve_spec_aux_hidden_state_config(
        server_args=sa,
        model_config=mc,
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        is_draft_worker=False,
    )
    classes = {"LlamaForCausalLM": LlamaForCausalLM, "Qwen2ForCausalLM": Qwen2ForCausalLM}
    target = classes[mc.hf_config.architectures[0]](mc.hf_config)
    if aux_cfg.eagle_use_aux_hidden_state:
        target.set_eagle3_layers_to_capture(aux_cfg.eagle_aux_hidden_state_layer_ids)
    dmc = ModelConfig.from_server_args(sa, model_path=ddir, is_draft_model=True)
    return aux_cfg, target, LlamaForCausalLMEagle3(dmc.hf_config), mc, dmc


def build(sa: Any, ddir: str, rank: int = 0) -> tuple[Any, Any, Any, Any]:
    """SGLang's real id reading, target (with real set_eagle3_layers_to_capture) and draft:
    ``(aux config, target model, draft runner, target runner)``."""
    import torch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    aux_cfg, target, draft, _, dmc = sglang_models(sa, ddir, rank)
    # the draft's own weight loader turns d2t into hot_token_id
    d2t = torch.arange(DRAFT_VOCAB, dtype=torch.int64) * 3  # draft id i -> target id 4i
    draft.load_weights([("d2t", d2t)])
    runner = SimpleNamespace(model=target, spec_aux_config=aux_cfg, server_args=sa)
    # what a draft ModelRunner holds that SGLang's own draft-input sizing reads
    draft_runner = SimpleNamespace(
        model=draft, model_config=dmc, spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3")
    )
    return aux_cfg, target, draft_runner, runner


def verify_objects(
    bs: int, n: int, topk: int, accept_lens: list[int], seed: int, real_reqs: bool = False
) -> tuple[Any, Any, dict]:
    """A real EagleVerifyInput / GenerationBatchResult / ScheduleBatch with small CPU tensors
    (and real ``Req`` objects when ``real_reqs``)."""
    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    g = torch.Generator().manual_seed(seed)
    draft = torch.randint(1, VOCAB, (bs * n,), generator=g, dtype=torch.int64)
    nxt = torch.randint(1, VOCAB, (bs * n,), generator=g, dtype=torch.int32)
    if topk == 1:  # chain: node j -> j+1
        nt = torch.tensor([[j + 1 if j + 1 < n else -1 for j in range(n)]] * bs, dtype=torch.int64)
        ns = torch.full((bs, n), -1, dtype=torch.int64)
        parents = None
    else:  # root 0 -> {1, 2}, 1 -> {3}
        assert n == 4 and bs == 2 and accept_lens == [3, 2]
        nt = torch.tensor([[1, 3, -1, -1]] * bs, dtype=torch.int64)
        ns = torch.tensor([[-1, 2, -1, -1]] * bs, dtype=torch.int64)
        parents = [[-1, 0, 0, 1]] * bs
        # The target's tokens come node by node; the request 0 accepts the path 0 -> 1 -> 3, request
        # 1 the path 0 -> 2. SGLang's own tree finalisation (every supported version) moves each
        # accepted path to the front of its row before the result is returned.
        from sglang.srt.speculative.eagle_worker_common import _compact_accept_to_front

        accept_index = torch.tensor([[0, 1, 3, -1], [4, 6, -1, -1]], dtype=torch.int64)
        predict = nxt
        nxt = _compact_accept_to_front(predict, accept_index, bs, num_draft_tokens=n)
        path_tokens = [predict[accept_index[i, : accept_lens[i]]].tolist() for i in range(bs)]
    seq_lens = torch.full((bs,), 10, dtype=torch.int64)
    vi = EagleVerifyInput(
        draft_token=draft,
        custom_mask=torch.ones(bs * n * (10 + n), dtype=torch.bool),
        positions=torch.arange(bs * n, dtype=torch.int64),
        retrieve_index=torch.arange(bs * n, dtype=torch.int64).view(bs, n),
        retrieve_next_token=nt,
        retrieve_next_sibling=ns,
        retrieve_cum_len=None,
        spec_steps=n - 1,
        topk=topk,
        draft_token_num=n,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=int(seq_lens.sum()),
        seq_lens_cpu=seq_lens,
    )
    if real_reqs:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        reqs: list[Any] = [
            Req(f"req-{seed}-{i}", "", [5, 6, 7], SamplingParams(max_new_tokens=8)) for i in range(bs)
        ]
    else:
        reqs = [SimpleNamespace(rid=f"req-{seed}-{i}") for i in range(bs)]
    batch = ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.TARGET_VERIFY, spec_info=vi, device="cpu")
    hidden = torch.randn(bs * n, 3 * HIDDEN, generator=g)
    res = GenerationBatchResult(
        logits_output=LogitsProcessorOutput(next_token_logits=None, hidden_states=hidden),
        next_token_ids=nxt,
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
        speculative_num_draft_tokens=n,
    )
    dn, nn = draft.view(bs, n).tolist(), nxt.view(bs, n).tolist()
    expect = {
        "rids": [r.rid for r in reqs],
        "draft": dn,
        "accepted": [a - 1 for a in accept_lens],
        "tokens": [t for i in range(bs) for t in nn[i][: accept_lens[i]]],
        "topk": topk,
        "parents": parents,
        "draft_tokens_by_row": [nn[i][: accept_lens[i]] for i in range(bs)],
    }
    if topk > 1:  # what the stream must show: the accepted path's tokens, read off the tree
        expect["tokens"] = [t for row in path_tokens for t in row]
        expect["draft_tokens_by_row"] = path_tokens
    return batch, res, expect


def eagle_worker(sa: Any, runner: Any, draft_runner: Any) -> Any:
    """A real ``EAGLEWorkerV2`` instance holding what our hooks read of it (its ``__init__`` needs a
    GPU model runner and KV pools): steps 3, topk 1, 4 draft tokens."""
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    worker = object.__new__(EAGLEWorkerV2)
    worker._target_worker = SimpleNamespace(model_runner=runner)
    worker._draft_worker = SimpleNamespace(draft_runner=draft_runner)
    worker.server_args = sa
    worker.topk, worker.speculative_num_steps, worker.speculative_num_draft_tokens = 1, 3, 4
    worker.speculative_algorithm = SpeculativeAlgorithm.from_string("EAGLE3")
    return worker


def linger(tracer: Any) -> None:
    """Say so (create E3T_TEST_READY), then stay up until the parent has read what it needs (it
    creates E3T_TEST_RELEASE); then close. A wait on the parent, not a fixed time: a loaded box
    took longer than any fixed time to deliver a hello."""
    import time

    from patience import HANG_GUARD_S

    with open(os.environ["E3T_TEST_READY"], "w"):
        pass
    deadline = time.monotonic() + HANG_GUARD_S
    while not os.path.exists(os.environ["E3T_TEST_RELEASE"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    if tracer is not None:
        tracer.publisher.close()
