"""The SGLang integration against SGLang's real code, on CPU (DESIGN.md §8).

Everything that imports sglang runs in a child interpreter with the GPU-only packages served by
stand-ins (tests/sglang_cpu.py), so nothing leaks into the other tests' ``sys.modules``. Two children
run: one builds SGLang's real ServerArgs / models / verify-input objects and drives our verify
wrapper with a real loopback subscriber; one drives SGLang's real plugin loader. The scenarios are
the ``child_*`` functions below; pytest only reads the JSON they print.

``make test`` runs this file twice: against SGLang 0.5.23 in .venv, and against 0.5.17 (the oldest
supported) put in front of it with PYTHONPATH (.ci/sglang-overlay.sh); the children read the
version's own objects, so where 0.5.17 keeps things differently the assertions say which way.

Skipped where sglang is not installed. We test for it with ``find_spec`` rather than
``pytest.importorskip``: importing sglang without the stand-ins fails (``import triton``), and with
them would leak stand-ins into this process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import socket
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402

MARK = "@@E3T-RESULT@@"
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_body(func: str) -> str:
    return f"""
import json, test_sglang_integration as t
out = t.{func}()
print({MARK!r} + json.dumps(out))
"""


def _child_result(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise AssertionError(f"child printed no result:\n{stdout[-3000:]}")


def _run_child(func: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return _child_result(sglang_cpu.run_in_sglang_subprocess(_child_body(func), env=env, timeout=240))


# ================================================================================================
# child side (runs with the stand-ins installed)
# ================================================================================================


def _write_models(root: str, name: str, case: dict[str, Any]) -> tuple[str, str]:
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


def _argv(tdir: str, ddir: str, **spec: int) -> list[str]:
    """The launcher's command line for these models and ``--speculative-*`` flags."""
    argv = ["--model-path", tdir, "--device", "cpu", "--skip-tokenizer-init"]
    argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", ddir]
    for k, v in spec.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return argv


def _server_args(tdir: str, ddir: str, **spec: int) -> Any:
    """ServerArgs as SGLang's launcher makes them from its command line (``prepare_server_args``):
    0.5.17 rewrites the record in ``__post_init__``; 0.5.23 resolves it in ``resolve_once``."""
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(_argv(tdir, ddir, **spec))
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    return sa


def _sglang_effective(sa: Any, field: str) -> Any:
    """A field's value after SGLang's own resolution, read the way that version keeps it."""
    if hasattr(sa, "resolved_dict"):
        return sa.resolved_dict()[field]
    return getattr(sa, field)  # rewritten in place


def _init_dp_attention(sa: Any, mc: Any) -> None:
    """What SGLang's model runner does before it builds a model: 0.5.17's layers read the attention
    data-parallel size when tensor-parallel (0.5.23 derives it from the published context)."""
    from sglang.srt.runtime_context import get_parallel

    try:
        _ = get_parallel().attn_dp_size
    except AssertionError:  # "dp attention not initialized!"
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        initialize_dp_attention(sa, mc)


def _build(sa: Any, ddir: str, rank: int = 0) -> tuple[Any, Any, Any, Any]:
    """SGLang's real id reading, target (with real set_eagle3_layers_to_capture) and draft:
    ``(aux config, target model, draft runner, target runner)``."""
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.models.llama import LlamaForCausalLM
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sglang_cpu.publish_server_args(sa, rank)
    mc = ModelConfig.from_server_args(sa)
    _init_dp_attention(sa, mc)
    aux_cfg = resolve_spec_aux_hidden_state_config(
        server_args=sa,
        model_config=mc,
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
        is_draft_worker=False,
    )
    target = LlamaForCausalLM(mc.hf_config)
    if aux_cfg.eagle_use_aux_hidden_state:
        target.set_eagle3_layers_to_capture(aux_cfg.eagle_aux_hidden_state_layer_ids)
    dmc = ModelConfig.from_server_args(sa, model_path=ddir, is_draft_model=True)
    draft = LlamaForCausalLMEagle3(dmc.hf_config)
    # the draft's own weight loader turns d2t into hot_token_id
    d2t = torch.arange(DRAFT_VOCAB, dtype=torch.int64) * 3  # draft id i -> target id 4i
    draft.load_weights([("d2t", d2t)])
    runner = SimpleNamespace(model=target, spec_aux_config=aux_cfg, server_args=sa)
    # what a draft ModelRunner holds that SGLang's own draft-input sizing reads
    draft_runner = SimpleNamespace(
        model=draft, model_config=dmc, spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3")
    )
    return aux_cfg, target, draft_runner, runner


def child_wiring() -> dict[str, Any]:
    import tempfile

    from eagle3_top.hooks.sglang.wiring import spec_report, wiring_from_objects

    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix="e3t-sgl-")
    out: dict[str, Any] = {"layers": {}, "spec": {}}

    # -- spec rewrites, by SGLang's own resolution pipeline ----------------------------------
    import sglang

    out["version"] = sglang.__version__
    tdir, ddir = _write_models(root, "spec", LAYER_CASES["nested"])
    topk1 = dict(speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=16)
    sa = _server_args(tdir, ddir, **topk1)
    # argv as the scheduler process inherits it from the launcher (0.5.17 needs it; 0.5.23 does not)
    out["spec"]["topk1"] = spec_report(sa, target_arch="LlamaForCausalLM", argv=_argv(tdir, ddir, **topk1))
    out["spec"]["topk1_sglang_effective"] = _sglang_effective(sa, "speculative_num_draft_tokens")
    out["spec"]["keeps_raw_inputs"] = hasattr(sa, "resolve_once")
    if out["spec"]["keeps_raw_inputs"]:  # the view wiring.py reads, where SGLang's launcher reads it
        from sglang.srt.arg_groups.overrides import resolving_view

        view = resolving_view(sa)
        out["spec"]["view_num_draft_tokens"] = view.speculative_num_draft_tokens
    sa_auto = _server_args(tdir, ddir)
    out["spec"]["auto"] = spec_report(sa_auto, target_arch="LlamaForCausalLM", argv=_argv(tdir, ddir))
    # 0.5.17 style: ServerArgs already rewritten in place, requested values only in argv
    old = SimpleNamespace(
        _resolved_overrides=[("model_override", {"disable_radix_cache": True})],  # 0.5.17 has one too
        speculative_algorithm="EAGLE3",
        speculative_num_steps=1,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=2,
        max_running_requests=48,
    )
    argv = [
        "--model-path",
        tdir,
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "1",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "16",
    ]
    out["spec"]["argv"] = spec_report(old, argv=argv, target_arch="LlamaForCausalLM")
    out["spec"]["unknown"] = spec_report(old, argv=[], target_arch="LlamaForCausalLM")

    # -- layer ids: real reading, real capture setup, our report --------------------------------
    for name, case in LAYER_CASES.items():
        tdir, ddir = _write_models(root, name, case)
        sa = _server_args(
            tdir, ddir, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
        )
        aux_cfg, target, draft_runner, runner = _build(sa, ddir)
        draft = draft_runner.model
        hello = wiring_from_objects(sa, target, draft, ddir, target_runner=runner, draft_runner=draft_runner)
        out["layers"][name] = {
            "sglang_ids": aux_cfg.eagle_aux_hidden_state_layer_ids,
            "sglang_layers_to_capture": list(target.model.layers_to_capture),
            "sglang_capture_aux": bool(target.capture_aux_hidden_states),
            "sglang_fc_in": int(draft.model.fc.in_features),
            "hello": hello,
        }
    out["arch_rules"] = _arch_rules()
    json.dumps(out)  # must be plain data, as it goes on the wire
    return out


ARCH_ID_CASES = [[1, 3, 5], [2, 4, 6], [-1, 2, 5], [0, 3, 8], [3, 3, 5], [5, 1, 3]]


def _arch_rules() -> list[dict[str, Any]]:
    """SGLang's real ``set_eagle3_layers_to_capture`` of other families, run on stand-in selves:
    our offline rule (layers_native.native_from_ids) must store what SGLang stores, and our live
    reader must find it (``layers_to_capture`` or the ``_is_layer_to_capture`` flags)."""
    import functools

    from eagle3_top.hooks.sglang import layers_native as ln
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM
    from sglang.srt.models.gpt_oss import GptOssForCausalLM
    from sglang.srt.models.qwen2_moe import Qwen2MoeModel
    from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM

    n = 8
    rows = []
    for cls, fam, arch in (
        (DeepseekV2ForCausalLM, ln.DEEPSEEK, "DeepseekV3ForCausalLM"),
        (GptOssForCausalLM, ln.GPT_OSS, "GptOssForCausalLM"),
        (Qwen3MoeForCausalLM, ln.LLAMA, "Qwen3MoeForCausalLM"),
    ):
        for ids in [None, *ARCH_ID_CASES]:
            inner = SimpleNamespace(layers=[SimpleNamespace() for _ in range(n)], layers_to_capture=[])
            inner.set_eagle3_layers_to_capture = functools.partial(
                Qwen2MoeModel.set_eagle3_layers_to_capture, inner
            )
            me = SimpleNamespace(
                pp_group=SimpleNamespace(is_last_rank=True),
                config=SimpleNamespace(num_hidden_layers=n, architectures=[arch]),
                model=inner,
            )
            try:
                cls.set_eagle3_layers_to_capture(me, None if ids is None else list(ids))
                stored, err = list(inner.layers_to_capture), None
            except Exception as exc:  # e.g. an out-of-range flag index
                stored, err = None, type(exc).__name__
            live = ln.live_capture(me) if err is None else None
            flags_only = None
            if err is None and fam == ln.LLAMA:
                del inner.layers_to_capture  # Qwen3-Next / Qwen3.5 style: only flags
                flags_only = ln.live_capture(me)
            rows.append(
                {
                    "arch": arch,
                    "family": fam,
                    "ids": ids,
                    "stored": stored,
                    "error": err,
                    "ours": ln.native_from_ids(ln.family_of(None, arch), ids, n),
                    "live": live,
                    "flags_only": flags_only,
                }
            )
    return rows


def _verify_objects(
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


def _worker(sa: Any, runner: Any, draft_runner: Any) -> Any:
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


def _linger(tracer: Any) -> None:
    """Stay up E3T_TEST_LINGER seconds, so the parent's subscriber reads what was sent; then close."""
    import time

    time.sleep(float(os.environ.get("E3T_TEST_LINGER", "5")))
    if tracer is not None:
        tracer.publisher.close()


def child_rank() -> dict[str, Any]:
    """One tensor-parallel rank of a real two-process gloo world (E3T_TEST_RANK): SGLang's own rank
    functions say which rank this process is, and our plugin decides whether, and where, it
    publishes. Stays up E3T_TEST_LINGER seconds so the parent's subscriber reads what it sent."""
    import tempfile

    from eagle3_top.hooks.sglang import plugin

    rank = int(os.environ["E3T_TEST_RANK"])
    sglang_cpu.init_process_group(2, rank)
    root = tempfile.mkdtemp(prefix=f"e3t-sgl-r{rank}-")
    tdir, ddir = _write_models(root, "tp2", LAYER_CASES["nested"])
    spec = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    sa = _server_args(tdir, ddir, tp_size=2, **spec)
    _aux_cfg, target, draft_runner, runner = _build(sa, ddir, rank)
    tracer = plugin.tracer_for_worker(_worker(sa, runner, draft_runner))
    out = {
        "ranks": plugin.ranks(),
        "publishing": tracer is not None,
        "bound": None if tracer is None else tracer.publisher.bound_endpoint,
        "socket_bound": plugin._state["publisher"] is not None,
        "off": plugin._state["off"],
        "layers_to_capture": list(target.model.layers_to_capture),
    }
    _linger(tracer)
    return out


def child_dp_replica() -> dict[str, Any]:
    """One data-parallel replica (E3T_TEST_DP_RANK) of a --dp-size 2 server, TP 1: a world of its own.
    The replica's rank reaches the scheduler the way this SGLang passes it (0.5.23: the published
    parallel context; 0.5.17: an argument of ``Scheduler.__init__``), and our scheduler-init hook
    runs around an ``__init__`` with SGLang's real signature."""
    import inspect
    import tempfile

    from eagle3_top.hooks.sglang import plugin
    from sglang.srt.managers.scheduler import Scheduler

    dp = int(os.environ["E3T_TEST_DP_RANK"])
    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix=f"e3t-sgl-dp{dp}-")
    tdir, ddir = _write_models(root, "dp", LAYER_CASES["nested"])
    spec = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    sa = _server_args(tdir, ddir, dp_size=2, **spec)
    _aux_cfg, _target, draft_runner, runner = _build(sa, ddir)
    sglang_cpu.publish_server_args(sa, dp_rank=dp)  # where 0.5.23 keeps the replica's rank
    worker = _worker(sa, runner, draft_runner)
    sig = inspect.signature(Scheduler.__init__)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:  # the real one needs a GPU model runner
        self.draft_worker = worker

    init.__signature__ = sig  # type: ignore[attr-defined]
    kwargs = {name: None for name in list(sig.parameters)[1:]}
    if "dp_rank" in kwargs:
        kwargs["dp_rank"] = dp  # as 0.5.17's run_scheduler_process passes it
    plugin._around_scheduler_init(init, object.__new__(Scheduler), **kwargs)
    tracer = plugin.tracer_for_worker(worker)
    out = {
        "ranks": plugin.ranks(),
        "bound": None if tracer is None else tracer.publisher.bound_endpoint,
        "off": plugin._state["off"],
    }
    _linger(tracer)
    return out


def child_verify() -> dict[str, Any]:
    """Real EAGLEWorkerV2 class, hooked through SGLang's HookRegistry by our register()."""
    import tempfile
    import time

    from eagle3_top.hooks.sglang import plugin
    from eagle3_top.hooks.sglang.verify import STEP_ATTR
    from eagle3_top.tracer.subscriber import Subscriber
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix="e3t-sgl-")
    tdir, ddir = _write_models(root, "verify", LAYER_CASES["nested"])
    sa = _server_args(
        tdir, ddir, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
    )
    aux_cfg, target, draft_runner, runner = _build(sa, ddir)

    results: dict[int, Any] = {}

    def fake_verify(self: Any, batch: Any, pp_proxy_tensors: Any = None, grammar_barrier: Any = None) -> Any:
        return results[id(batch)]  # run_eagle_verify needs a GPU; the hook wraps whatever is there

    processed: list[tuple[int, int]] = []

    def fake_process(self: Any, batch: Any, result: Any) -> None:
        processed.append((id(batch), id(result)))  # the real one needs a whole live scheduler

    EAGLEWorkerV2.verify = fake_verify
    Scheduler.process_batch_result = fake_process
    plugin.register()
    HookRegistry.apply_hooks()
    wrapped = getattr(EAGLEWorkerV2.verify, "__wrapped__", None) is fake_verify
    wrapped = wrapped and getattr(Scheduler.process_batch_result, "__wrapped__", None) is fake_process

    worker = _worker(sa, runner, draft_runner)

    endpoint = os.environ["EAGLE3_TOP_PUBLISH"]
    sub = Subscriber([endpoint])
    tracer = plugin.tracer_for_worker(worker)  # binds, publishes the hello
    assert tracer is not None, plugin._state["off"]
    # wait until the subscription is live (a health event arrives), then re-send the hello
    deadline = time.monotonic() + 10
    seen: list[Any] = []
    while time.monotonic() < deadline and not any(e.kind == "health" for e in seen):
        seen += sub.poll(200)
    tracer.publisher.set_hello(tracer.publisher._hello)

    expects = []
    b1, r1, e1 = _verify_objects(3, 4, 1, [1, 4, 2], seed=1)
    b2, r2, e2 = _verify_objects(2, 4, 2, [3, 2], seed=2)
    for b, r in ((b1, r1), (b2, r2)):
        results[id(b)] = r
    returned = [worker.verify(b1) is r1, worker.verify(b2) is r2]
    expects += [e1, e2]

    # idle batch, batch without spec_info: no event, no error
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    idle = ScheduleBatch(reqs=[], forward_mode=ForwardMode.IDLE, spec_info=None, device="cpu")
    results[id(idle)] = r1
    returned.append(worker.verify(idle) is r1)
    nospec = ScheduleBatch(reqs=b1.reqs, forward_mode=ForwardMode.TARGET_VERIFY, spec_info=None, device="cpu")
    results[id(nospec)] = r1
    returned.append(worker.verify(nospec) is r1)
    # a request object that breaks our read (no rid): the server still gets its result; we count it
    broken = ScheduleBatch(
        reqs=[object()] * 3, forward_mode=ForwardMode.TARGET_VERIFY, spec_info=b1.spec_info, device="cpu"
    )
    results[id(broken)] = r1
    returned.append(worker.verify(broken) is r1)

    # The overlap scheduler's tail row. Once process_batch_result has run through our hook, verify
    # holds its step on the result; the hook publishes it, leaving out the rows SGLang skips: under
    # overlap, requests already finished (or retracted) when the result is processed.
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    overlap, sync = object.__new__(Scheduler), object.__new__(Scheduler)
    overlap.enable_overlap, sync.enable_overlap = True, False
    Scheduler.process_batch_result(overlap, idle, r1)  # a prefill-like call: no step held on it
    tail: dict[str, Any] = {"held": [], "processed_ok": []}
    for sched, gone, seed in (
        (overlap, {1: "finished"}, 3),
        (sync, {1: "finished"}, 4),
        (overlap, {0: "retracted", 2: "finished"}, 5),
    ):
        b, r, e = _verify_objects(3, 4, 1, [2, 4, 3], seed=seed, real_reqs=True)
        results[id(b)] = r
        returned.append(worker.verify(b) is r)
        tail["held"].append(getattr(r, STEP_ATTR, None) is not None)
        for i, how in gone.items():
            if how == "finished":
                b.reqs[i].finished_reason = FINISH_LENGTH(length=8)
            else:
                b.reqs[i].is_retracted = True
        Scheduler.process_batch_result(sched, b, r)
        tail["processed_ok"].append(processed[-1] == (id(b), id(r)) and getattr(r, STEP_ATTR, None) is None)
        keep = [i for i in range(3) if sched is sync or i not in gone]
        expects.append(
            {
                "rids": [e["rids"][i] for i in keep],
                "draft": [e["draft"][i] for i in keep],
                "accepted": [e["accepted"][i] for i in keep],
                "tokens": [t for i in keep for t in e["draft_tokens_by_row"][i]],
                "topk": 1,
                "parents": None,
                "discarded": 3 - len(keep),
            }
        )

    events: list[Any] = []
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        events += sub.poll(200)
        kinds = [e.kind for e in events]
        if (
            kinds.count("step") >= 5
            and "aux" in kinds
            and any(e.kind == "health" and e.body.get("hook_errors") for e in events)
        ):
            break
    sub.close()
    tracer.publisher.close()

    def dec(b: Any) -> Any:
        return None if b is None else np.frombuffer(b, "<i4").tolist()

    steps = []
    for e in events:
        if e.kind == "step":
            b = e.body
            steps.append(
                {
                    "rids": b["rids"],
                    "n": b["n"],
                    "batch": b["batch"],
                    "topk": b["topk"],
                    "draft": np.frombuffer(b["draft"], "<i4").reshape(b["batch"], b["n"]).tolist(),
                    "accepted": dec(b["accepted"]),
                    "tokens": dec(b["tokens"]),
                    "parents": dec(b["parents"]),
                    "discarded": b.get("discarded", 0),
                }
            )
    hellos = [e.body for e in events + seen if e.kind == "hello"]
    auxes = [e.body for e in events if e.kind == "aux"]
    healths = [e.body for e in events if e.kind == "health"]
    return {
        "probe": _prefill_probe_on_real_reqs(),
        "wrapped": wrapped,
        "returned": returned,
        "tail": tail,
        "expects": expects,
        "steps": steps,
        "hello": hellos[-1] if hellos else None,
        "aux": auxes,
        "health": healths[-1] if healths else None,
        "src": sorted({e.src for e in events}),
    }


def _prefill_probe_on_real_reqs() -> list[dict[str, Any]]:
    """A prefill batch of SGLang's real ``Req`` objects through our probe capture: one ordinary
    request, one probe with a 4-token cached prefix. The prompt ids must come from the requests
    themselves, not from the batch's device ids (zeros here)."""
    import torch
    from eagle3_top.hooks.attach import Tracer
    from eagle3_top.hooks.sglang.probe import record_prefill_probes
    from eagle3_top.tracer.probe import decode_probe
    from eagle3_top.tracer.publisher import MemoryPublisher
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams

    reqs = [
        Req("req-a", "", [11, 12, 13], SamplingParams(max_new_tokens=4)),
        Req("e3t-probe-0-x", "", [9, 8, 7, 6, 5, 4, 3], SamplingParams(max_new_tokens=4)),
    ]
    batch = ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.EXTEND, device="cpu")
    batch.extend_lens, batch.prefix_lens = [3, 3], [0, 4]
    batch.input_ids = torch.zeros(6, dtype=torch.int64)
    hidden = torch.arange(6 * 3 * HIDDEN, dtype=torch.float32).reshape(6, 3 * HIDDEN)
    pub = MemoryPublisher()
    tracer = Tracer(pub)  # type: ignore[arg-type]
    tracer.set_slot_width(HIDDEN)
    record_prefill_probes(tracer, batch, hidden)
    out = []
    for body in pub.bodies("probe"):
        got = decode_probe(body)
        out.append(
            {
                "rid": got.rid,
                "offset": got.offset,
                "rows": got.rows,
                "ids": got.input_ids.tolist(),
                "aux_is_its_rows": bool(np.array_equal(got.aux, hidden[3:6].numpy())),
                "hook_errors": pub.hook_errors,
            }
        )
    return out


def child_plugin_loader() -> dict[str, Any]:
    """SGLang's real ``load_plugins()`` finding our entry point, without and with the env var."""
    from importlib.metadata import entry_points

    import sglang
    import sglang.srt.plugins as plugins
    from eagle3_top.hooks.sglang import plugin
    from sglang.srt.plugins.hook_registry import HookRegistry

    eps = [f"{ep.name}={ep.value}" for ep in entry_points(group="sglang.srt.plugins")]
    out: dict[str, Any] = {"entry_points": eps}

    def state() -> dict[str, Any]:
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

        return {
            "targets": sorted(
                t
                for t in HookRegistry._hooks
                if t in (plugin.VERIFY_TARGET, plugin.SCHEDULER_INIT_TARGET, plugin.RESULT_TARGET)
            ),
            "verify_wrapped": hasattr(EAGLEWorkerV2.verify, "__wrapped__"),
            "init_wrapped": hasattr(Scheduler.__init__, "__wrapped__"),
            "publisher": plugin._state["publisher"] is not None,
            "off": plugin._state["off"],
        }

    os.environ.pop("EAGLE3_TOP_PUBLISH", None)
    plugins.load_plugins()
    out["without_env"] = state()

    os.environ["EAGLE3_TOP_PUBLISH"] = "tcp://127.0.0.1:1"  # never bound: no scheduler here
    plugins._plugins_loaded = False
    plugins.load_plugins()
    out["with_env"] = state()

    # an untested version: one log line, stays off, registers nothing
    plugin._reset_for_tests()
    HookRegistry.reset() if hasattr(HookRegistry, "reset") else None
    real = sglang.__version__
    sglang.__version__ = "0.6.1"
    plugin.register()
    sglang.__version__ = real
    out["bad_version"] = {
        "off": plugin._state["off"],
        "registered": plugin._state["registered"],
        "targets": sorted(HookRegistry._hooks),
    }
    out["version"] = real
    return out


# ================================================================================================
# pytest side
# ================================================================================================


@pytest.fixture(scope="module")
def wiring() -> dict[str, Any]:
    return _run_child("child_wiring")


@pytest.fixture(scope="module")
def verify_run() -> dict[str, Any]:
    return _run_child("child_verify", env={"EAGLE3_TOP_PUBLISH": f"tcp://127.0.0.1:{_free_port()}"})


@pytest.fixture(scope="module")
def loader() -> dict[str, Any]:
    return _run_child("child_plugin_loader")


def _free_port_pair() -> int:
    """A port p with p + 1 free too (rank r publishes on port + r)."""
    for _ in range(50):
        p = _free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise AssertionError("no two consecutive free ports")


def _run_two_ranks(all_ranks: bool, child: str = "child_rank") -> dict[str, Any]:
    """Two scheduler-like processes (``child``: TP ranks 0 and 1 of one world, or
    ``child_dp_replica``: DP replicas 0 and 1, a world each) and a subscriber on ports p and p + 1."""
    import time

    from eagle3_top.hooks.sglang.plugin import endpoint_for_rank
    from eagle3_top.tracer.subscriber import Subscriber

    endpoint = f"tcp://127.0.0.1:{_free_port_pair()}"
    env = {"EAGLE3_TOP_PUBLISH": endpoint, "MASTER_PORT": str(_free_port()), "E3T_TEST_LINGER": "5"}
    if all_ranks:
        env["EAGLE3_TOP_ALL_RANKS"] = "1"
    sub = Subscriber([endpoint, endpoint_for_rank(endpoint, 1)])
    own = (
        [{"E3T_TEST_RANK": str(r)} for r in (0, 1)]
        if child == "child_rank"
        else [{"E3T_TEST_DP_RANK": str(r), "MASTER_PORT": str(_free_port())} for r in (0, 1)]
    )
    procs = [sglang_cpu.start_sglang_subprocess(_child_body(child), env={**env, **o}) for o in own]
    events: list[Any] = []
    deadline = time.monotonic() + 200
    try:
        while time.monotonic() < deadline and any(p.running() for p in procs):
            events += sub.poll(100)
        children = [_child_result(p.finish(timeout=30)) for p in procs]
    finally:
        for p in procs:
            if p.running():
                p.proc.kill()
        sub.close()
    hellos = {e.src: e.body for e in events if e.kind == "hello"}
    return {"endpoint": endpoint, "children": children, "hellos": hellos}


@pytest.fixture(scope="module")
def two_ranks() -> dict[str, Any]:
    return _run_two_ranks(all_ranks=False)


@pytest.fixture(scope="module")
def two_ranks_all() -> dict[str, Any]:
    return _run_two_ranks(all_ranks=True)


@pytest.fixture(scope="module")
def two_replicas() -> dict[str, Any]:
    return _run_two_ranks(all_ranks=False, child="child_dp_replica")


def test_children_run_the_sglang_under_test(wiring: dict[str, Any]) -> None:
    from eagle3_top.hooks.sglang.plugin import version_supported

    assert wiring["version"] == importlib.metadata.version("sglang")
    assert version_supported(wiring["version"])


def test_topk1_rewrite_reported_as_sglang_resolved_it(wiring: dict[str, Any]) -> None:
    spec = wiring["spec"]["topk1"]
    assert wiring["spec"]["topk1_sglang_effective"] == 2  # SGLang's own pipeline did the rewrite
    if wiring["spec"]["keeps_raw_inputs"]:
        assert wiring["spec"]["view_num_draft_tokens"] == 2
    assert spec["requested"] == {"algorithm": "EAGLE3", "num_steps": 1, "topk": 1, "num_draft_tokens": 16}
    assert spec["effective"] == {"algorithm": "EAGLE3", "num_steps": 1, "topk": 1, "num_draft_tokens": 2}
    # 0.5.23 keeps the raw inputs and records the rewrite; 0.5.17 rewrites in place (argv says)
    assert spec["requested_source"] == (
        "declare_resolution" if wiring["spec"]["keeps_raw_inputs"] else "argv"
    )
    rw = {r["param"]: r for r in spec["rewrites"]}
    assert rw["num_draft_tokens"]["from"] == 16 and rw["num_draft_tokens"]["to"] == 2
    assert "topk=1" in rw["num_draft_tokens"]["reason"]
    assert rw["max_running_requests"]["to"] == 48 and rw["max_running_requests"]["from"] is None


def test_auto_chosen_params_reported(wiring: dict[str, Any]) -> None:
    spec = wiring["spec"]["auto"]
    assert spec["requested"]["num_steps"] is None
    assert spec["effective"] == {"algorithm": "EAGLE3", "num_steps": 5, "topk": 4, "num_draft_tokens": 8}
    rw = {r["param"]: r for r in spec["rewrites"]}
    assert {"num_steps", "topk", "num_draft_tokens"} <= set(rw)
    assert "auto-chooses" in rw["num_steps"]["reason"]


def test_requested_from_argv_when_server_args_were_rewritten_in_place(wiring: dict[str, Any]) -> None:
    spec = wiring["spec"]["argv"]
    assert spec["requested_source"] == "argv"
    assert spec["requested"]["num_draft_tokens"] == 16 and spec["effective"]["num_draft_tokens"] == 2
    assert [r["param"] for r in spec["rewrites"]][:1] == ["num_draft_tokens"]
    unknown = wiring["spec"]["unknown"]
    assert unknown["requested_source"] == "unknown" and unknown["rewrites"] == []


@pytest.mark.parametrize("name", list(LAYER_CASES))
def test_reported_layers_match_sglang_objects(wiring: dict[str, Any], name: str) -> None:
    case = wiring["layers"][name]
    aux = case["hello"]["aux"]
    ltc = case["sglang_layers_to_capture"]
    # what the live target holds, verbatim
    assert aux["capture_native"] == ltc
    assert aux["ids_read"] == case["sglang_ids"]
    assert aux["capture_source"] == "layers_to_capture"
    # canonical = what the forward loop really captures: input of layer i, ascending, once, in range
    assert aux["capture_canonical"] == [i - 1 for i in sorted(set(ltc)) if 0 <= i < N_LAYERS]
    assert aux["slots"] == len(aux["capture_canonical"])
    assert aux["expected_width"] == case["sglang_fc_in"]
    if case["sglang_capture_aux"]:
        assert aux["width"] == aux["slots"] * HIDDEN
        # SGLang sizes the draft's input (its draft-extend buffers) from the draft config alone:
        # the number of ids it lists, wherever they sit, or 3
        assert aux["sglang_input_width"] == 3 * HIDDEN
    else:  # no aux capture: the draft is fed the final hidden state, and sized for it
        assert aux["width"] == aux["sglang_input_width"] == HIDDEN and aux["slots"] == 0
    assert case["hello"]["model"]["num_layers"] == N_LAYERS
    assert case["hello"]["model"]["draft_arch"] == "LlamaForCausalLMEagle3"


def test_layer_cases_show_the_known_failure_modes(wiring: dict[str, Any]) -> None:
    L = {k: v["hello"]["aux"] for k, v in wiring["layers"].items()}
    assert L["nested"]["ids_read"] == [0, 2, 3] and L["nested"]["capture_canonical"] == [0, 2, 3]
    assert L["nested"]["ids_location"] == "eagle_config"
    # top-level ids: declared, not read -> SGLang default [2, n//2, n-3] = canonical [1, 2, 2]... once
    for name in ("top_level", "missing"):
        assert L[name]["ids_read"] is None
        assert L[name]["capture_native"] == [2, N_LAYERS // 2, N_LAYERS - 3]
    assert L["top_level"]["declared_ids"] == [0, 2, 3] and L["top_level"]["ids_location"] == "top_level"
    assert L["missing"]["declared_ids"] is None and L["missing"]["ids_location"] == "missing"
    assert L["minus_one"]["capture_canonical"] == [-1, 2, 3]
    assert L["out_of_order"]["capture_native"] == [4, 1, 3]
    assert L["out_of_order"]["capture_canonical"] == [0, 2, 3]  # slots reordered vs training
    assert L["duplicated"]["slots"] == 2 and L["duplicated"]["expected_width"] == 3 * HIDDEN
    assert L["unreachable"]["capture_native"][-1] == N_LAYERS and L["unreachable"]["slots"] == 2
    off = L["aux_off"]
    assert off["use_aux_hidden_state"] is False and off["slots"] == 0 and off["capture_canonical"] == []
    assert off["width"] == HIDDEN and off["expected_width"] == 3 * HIDDEN


def test_other_families_rules_match_sglang_code(wiring: dict[str, Any]) -> None:
    from eagle3_top.hooks.sglang import layers_native as ln

    n = 8
    for row in wiring["arch_rules"]:
        if row["error"] is not None:
            # only an id past the last layer can fail here (flag index out of range)
            assert row["family"] == ln.LLAMA and max(row["ids"]) + 1 >= n, row
            continue
        assert row["ours"] == row["stored"], row
        assert row["live"]["native"] == row["stored"], row
        if row["flags_only"] is not None:
            assert row["flags_only"]["source"] == "_is_layer_to_capture"
            assert row["flags_only"]["native"] == sorted(set(row["stored"]))
    ds = {tuple(r["ids"] or ()): r for r in wiring["arch_rules"] if r["family"] == ln.DEEPSEEK}
    assert ds[(1, 3, 5)]["stored"] == [2, 4, 6]  # first id 1: +1
    assert ds[(2, 4, 6)]["stored"] == [2, 4, 6]  # otherwise as given
    assert ln.canonical_from_native(ln.DEEPSEEK, [2, 4, 6], n) == [1, 3, 5]
    assert ln.capture_failure(ln.DEEPSEEK, ds[(-1, 2, 5)]["stored"], n) is not None
    go = {tuple(r["ids"] or ()): r for r in wiring["arch_rules"] if r["family"] == ln.GPT_OSS}
    assert go[(0, 3, 8)]["stored"] == [0, 3, 8]  # boundary indices, used as given
    assert ln.canonical_from_native(ln.GPT_OSS, [0, 3, 8], n) == [-1, 2, 7]


def test_hello_shape_mirrors_toy(wiring: dict[str, Any]) -> None:
    hello = wiring["layers"]["nested"]["hello"]
    assert set(hello) >= {"engine", "model", "tp", "spec", "vocab", "aux"}
    assert hello["engine"]["name"] == "sglang"
    assert set(hello["model"]) >= {
        "target_path",
        "draft_path",
        "arch",
        "num_layers",
        "hidden_size",
        "vocab_size",
        "dtype",
        "draft_arch",
        "draft_vocab_size",
    }
    assert set(hello["aux"]) >= {
        "eagle_config",
        "declared_ids",
        "ids_location",
        "ids_read",
        "use_aux_hidden_state",
        "capture_native",
        "capture_canonical",
        "convention",
        "slots",
        "width",
        "expected_width",
    }
    assert hello["aux"]["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}
    v = hello["vocab"]
    assert v["size"] == DRAFT_VOCAB and v["max_target"] == 4 * (DRAFT_VOCAB - 1) and v["vocab_size"] == VOCAB
    assert hello["spec"]["effective"]["num_draft_tokens"] == 4


def test_verify_wrapper_publishes_real_steps(verify_run: dict[str, Any]) -> None:
    assert verify_run["wrapped"], "HookRegistry did not wrap EAGLEWorkerV2.verify"
    assert all(verify_run["returned"]), "the wrapper must hand back the original result, always"
    steps, expects = verify_run["steps"], verify_run["expects"]
    assert len(steps) == 5, steps  # idle / no-spec / broken batches publish nothing
    for got, exp in zip(steps, expects, strict=True):
        assert got["discarded"] == exp.get("discarded", 0)
        assert got["rids"] == exp["rids"]
        assert got["draft"] == exp["draft"]
        assert got["accepted"] == exp["accepted"]
        assert got["tokens"] == exp["tokens"]
        assert got["topk"] == exp["topk"]
        if exp["parents"] is None:
            assert got["parents"] is None
        else:
            assert np.array(got["parents"]).reshape(len(exp["rids"]), -1).tolist() == exp["parents"]
    assert all(t != 0 for s in steps for t in s["tokens"])


def test_probe_ids_come_from_sglangs_own_requests(verify_run: dict[str, Any]) -> None:
    (probe,) = verify_run["probe"]
    assert probe["rid"] == "e3t-probe-0-x" and probe["offset"] == 4 and probe["rows"] == 3
    assert probe["ids"] == [5, 4, 3]  # the prompt after its 4 cached tokens, read on the host
    assert probe["aux_is_its_rows"]  # rows 3..5 of the packed batch: the second request's
    assert probe["hook_errors"] == 0


def test_overlap_tail_rows_are_left_out_as_sglang_skips_them(verify_run: dict[str, Any]) -> None:
    """Under the overlap scheduler a request that finished one verify earlier is still in the next
    batch; SGLang drops that row when it processes the result, and so must the stream, or every
    request shows one verify step more than ``meta_info.spec_verify_ct``."""
    tail = verify_run["tail"]
    assert tail["held"] == [True, True, True], "steps must wait for the result to be processed"
    assert all(tail["processed_ok"]), "SGLang's own result processing must run, on the same objects"
    overlap_finished, sync_finished, overlap_mixed = verify_run["steps"][2:]
    assert overlap_finished["rids"] == ["req-3-0", "req-3-2"] and overlap_finished["discarded"] == 1
    assert sync_finished["batch"] == 3 and sync_finished["discarded"] == 0  # no overlap: SGLang keeps it
    assert overlap_mixed["rids"] == ["req-5-1"] and overlap_mixed["discarded"] == 2


def test_verify_wrapper_hello_aux_and_health(verify_run: dict[str, Any]) -> None:
    hello = verify_run["hello"]
    assert hello is not None and hello["engine"]["name"] == "sglang"
    assert hello["spec"]["effective"] == {
        "algorithm": "EAGLE3",
        "num_steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
    }
    assert hello["aux"]["capture_canonical"] == [0, 2, 3]
    aux = verify_run["aux"]
    assert aux and aux[0]["slots"] == 3 and aux[0]["slot_width"] == HIDDEN and aux[0]["rows"] == 12
    health = verify_run["health"]
    assert health["hook_errors"] >= 1 and not health["disabled"]  # the broken batch was counted
    assert len(verify_run["src"]) == 1 and verify_run["src"][0].endswith(":r0")


def test_plugin_loader_runs_our_entry_point(loader: dict[str, Any]) -> None:
    if not any(e.startswith("eagle3_top=") for e in loader["entry_points"]):
        pytest.skip("eagle3-top's entry point is not installed (pip install -e .)")
    assert "eagle3_top=eagle3_top.hooks.sglang.plugin:register" in loader["entry_points"]
    off = loader["without_env"]
    assert off["targets"] == [] and not off["verify_wrapped"] and not off["init_wrapped"]
    on = loader["with_env"]
    assert on["verify_wrapped"] and on["init_wrapped"] and len(on["targets"]) == 3
    assert not on["publisher"], "no socket may be bound outside a scheduler process"
    assert on["off"] is None


def test_untested_version_stays_off_with_one_reason(loader: dict[str, Any]) -> None:
    bad = loader["bad_version"]
    assert not bad["registered"] and "0.6.1" in bad["off"]
    assert bad["targets"] == []


def test_only_tp_rank_0_publishes_by_default(two_ranks: dict[str, Any]) -> None:
    r0, r1 = two_ranks["children"]
    # the ranks as SGLang's own parallel state reports them in each process
    assert r0["ranks"] == {"tp_rank": 0, "tp_size": 2, "pp_rank": 0, "pp_size": 1, "dp_rank": 0}
    assert r1["ranks"] == {"tp_rank": 1, "tp_size": 2, "pp_rank": 0, "pp_size": 1, "dp_rank": 0}
    assert r0["publishing"] and r0["bound"] == two_ranks["endpoint"]
    assert not r1["publishing"] and not r1["socket_bound"] and r1["off"] is None  # quiet, not broken
    (src,) = two_ranks["hellos"]
    assert src.endswith(":r0") and two_ranks["hellos"][src]["tp"] == {"rank": 0, "size": 2}


def test_all_ranks_publish_each_as_its_own_source(two_ranks_all: dict[str, Any]) -> None:
    from eagle3_top.hooks.sglang.plugin import endpoint_for_rank

    r0, r1 = two_ranks_all["children"]
    ep = two_ranks_all["endpoint"]
    assert r0["bound"] == ep and r1["bound"] == endpoint_for_rank(ep, 1)
    hellos = two_ranks_all["hellos"]
    assert sorted(src.rsplit(":", 1)[1] for src in hellos) == ["r0", "r1"]
    for src, hello in hellos.items():
        rank = int(src.rsplit(":r", 1)[1])
        assert hello["tp"] == {"rank": rank, "size": 2}
        # each rank reads its own live target: the same capture layers on both
        assert hello["aux"]["capture_native"] == [r0, r1][rank]["layers_to_capture"] == [1, 3, 4]


def test_each_data_parallel_replica_publishes_on_its_own_port(two_replicas: dict[str, Any]) -> None:
    """--dp-size 2: two TP-1 worlds, each its rank 0; before, both bound the same endpoint and one
    of them, whichever came second, switched itself off."""
    from eagle3_top.hooks.sglang.plugin import endpoint_for_rank

    d0, d1 = two_replicas["children"]
    assert (d0["ranks"]["dp_rank"], d1["ranks"]["dp_rank"]) == (0, 1)
    assert d0["off"] is None and d1["off"] is None
    ep = two_replicas["endpoint"]
    assert (d0["bound"], d1["bound"]) == (ep, endpoint_for_rank(ep, 1))
    assert sorted(src.rsplit(":", 1)[1] for src in two_replicas["hellos"]) == ["r0", "r1"]


def _findings(hello: dict[str, Any], trained: list[int] | None) -> set[str]:
    from eagle3_top.tracer.diagnose import SourceEvidence, diagnose
    from eagle3_top.tracer.manifest import Manifest

    ev = SourceEvidence("sglang:1:r0")
    ev.hello = hello
    manifest = None
    if trained is not None:
        manifest = Manifest(
            "m.json",
            {
                "aux": {
                    "layer_ids": trained,
                    "concat_order": trained,
                    "slots": len(trained),
                    "slot_width": HIDDEN,
                },
                "reference": {"fingerprint": {"rms": [1.0] * len(trained), "mean": [0.0] * len(trained)}},
            },
        )
    return {f.code for f in diagnose(ev, manifest)}


def test_diagnosis_on_sglang_hellos(wiring: dict[str, Any]) -> None:
    """The findings a deploy gate gets from SGLang's real objects, cause by cause."""
    L = {k: v["hello"] for k, v in wiring["layers"].items()}
    trained = [0, 2, 3]
    assert _findings(L["nested"], trained) == set()
    # ids not read: SGLang's default for 6 layers, [2, 3, 3], also collapses to two slots
    not_read = {"LAYER_IDS_NOT_READ", "LAYER_MAP_MISMATCH", "AUX_WIDTH_MISMATCH"}
    assert _findings(L["top_level"], trained) == not_read
    assert _findings(L["missing"], trained) == not_read
    assert _findings(L["out_of_order"], [3, 0, 2]) == {"LAYER_ORDER_MISMATCH"}
    assert "AUX_WIDTH_MISMATCH" in _findings(L["duplicated"], None)
    assert "AUX_WIDTH_MISMATCH" in _findings(L["unreachable"], None)
    assert _findings(L["minus_one"], [-1, 2, 3]) == set()
    # use_aux_hidden_state: false: SGLang captures nothing and feeds the final hidden state
    assert _findings(L["aux_off"], trained) == {"AUX_WIDTH_MISMATCH"}
    assert _findings(L["aux_off"], None) == {"AUX_WIDTH_MISMATCH"}
