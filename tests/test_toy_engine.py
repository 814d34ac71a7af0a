"""Tests for the built-in toy EAGLE-3 engine (hooks/toy). CPU only, a few seconds each."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")

from eagle3_top.hooks.toy import paths  # noqa: E402
from eagle3_top.hooks.toy.engine import ToyEagle3Engine  # noqa: E402
from eagle3_top.hooks.toy.model import ToyLlamaConfig, ToyLlamaForCausalLM  # noqa: E402
from eagle3_top.hooks.toy.spec_args import (  # noqa: E402
    TOPK1_REASON,
    SpecArgs,
    read_aux_layer_ids,
    read_eagle_config,
    resolve_spec_args,
)
from eagle3_top.hooks.toy.train import greedy_generate  # noqa: E402
from eagle3_top.hooks.toy.workload import VOCAB_SIZE, make_prompts  # noqa: E402

LLAMA = "LlamaForCausalLM"


# ---------------------------------------------------------------- flags
def test_topk1_rewrites_num_draft_tokens():
    eff, rw = resolve_spec_args(SpecArgs("EAGLE3", 1, 1, 16), LLAMA)
    assert (eff.num_steps, eff.topk, eff.num_draft_tokens) == (1, 1, 2)
    assert rw == [{"param": "num_draft_tokens", "from": 16, "to": 2, "reason": TOPK1_REASON}]
    assert TOPK1_REASON == "topk=1 forces num_draft_tokens = num_steps + 1"


def test_topk1_without_ndt_is_not_a_rewrite():
    eff, rw = resolve_spec_args(SpecArgs("EAGLE3", 3, 1, None), LLAMA)
    assert eff.num_draft_tokens == 4 and rw == []
    eff, rw = resolve_spec_args(SpecArgs("EAGLE3", 3, 1, 4), LLAMA)
    assert eff.num_draft_tokens == 4 and rw == []


def test_auto_choose_keyed_on_target_arch():
    eff, rw = resolve_spec_args(SpecArgs("EAGLE3", None, None, None), LLAMA)
    assert (eff.num_steps, eff.topk, eff.num_draft_tokens) == (5, 4, 8)
    assert {r["param"] for r in rw} == {"num_steps", "topk", "num_draft_tokens"}
    eff, _ = resolve_spec_args(SpecArgs("EAGLE3", None, None, None), "Qwen3ForCausalLM")
    assert (eff.num_steps, eff.topk, eff.num_draft_tokens) == (3, 1, 4)


@pytest.mark.parametrize("topk,ndt", [(1, None), (None, 4), (2, 8)])
def test_topk_or_ndt_without_steps_is_an_error(topk, ndt):
    with pytest.raises(ValueError, match="AssertionError"):
        resolve_spec_args(SpecArgs("EAGLE3", None, topk, ndt), LLAMA)


# ---------------------------------------------------------------- draft config reading
def _write(tmp_path, name, content):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(content if isinstance(content, str) else json.dumps(content))
    return str(d)


def test_read_aux_layer_ids(tmp_path):
    nested = _write(tmp_path, "nested", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]}})
    top = _write(
        tmp_path,
        "top",
        {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5], "eagle_config": {"use_aux_hidden_state": True}},
    )
    top_only = _write(tmp_path, "toponly", {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]})
    broken = _write(tmp_path, "broken", '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [')
    not_dict = _write(tmp_path, "notdict", {"eagle_config": [1, 2]})
    assert read_aux_layer_ids(nested) == [-1, 2, 5]
    assert read_aux_layer_ids(top) is None
    assert read_aux_layer_ids(top_only) is None
    assert read_aux_layer_ids(broken) is None
    assert read_aux_layer_ids(not_dict) is None
    assert read_aux_layer_ids(str(tmp_path / "missing")) is None
    assert read_eagle_config(top) == (True, None)
    off = _write(
        tmp_path,
        "off",
        {"eagle_config": {"use_aux_hidden_state": False, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
    )
    assert read_eagle_config(off) == (False, [1, 2, 3])


def test_bundled_configs_read_as_intended():
    assert read_aux_layer_ids(paths.draft_dir()) == [-1, 2, 5]
    assert read_aux_layer_ids(paths.draft_ids_not_read_dir()) is None
    with open(os.path.join(paths.draft_ids_not_read_dir(), "config.json")) as f:
        assert json.load(f)["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 5]


# ---------------------------------------------------------------- capture layers
@pytest.fixture(scope="module")
def small_target():
    torch.manual_seed(0)
    m = ToyLlamaForCausalLM(
        ToyLlamaConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64)
    ).eval()
    ids = torch.randint(1, VOCAB_SIZE, (2, 7))
    with torch.no_grad():
        hs, _ = m.all_hidden_states(ids)
    assert float(hs[0].abs().min()) > 0  # never test on all-zero tensors
    return m, ids, hs


@pytest.mark.parametrize(
    "ids,native,canonical_slots",
    [
        (None, [2, 4, 5], [1, 3, 4]),
        ([-1, 2, 5], [0, 3, 6], [-1, 2, 5]),
        ([5, -1, 2], [6, 0, 3], [-1, 2, 5]),  # kept as given, captured in ascending order
        ([2, 2, 5], [3, 3, 6], [2, 5]),  # duplicate collapses
        ([1, 3, 7], [2, 4, 8], [1, 3]),  # n-1 -> n is never reached
    ],
)
def test_layers_to_capture(small_target, ids, native, canonical_slots):
    m, tokens, hs = small_target
    m.set_eagle3_layers_to_capture(ids)
    assert m.capture_aux_hidden_states is True
    assert m.model.layers_to_capture == native
    H = m.config.hidden_size
    cache = m.new_cache(tokens.shape[0], 16)
    with torch.no_grad():
        _, aux = m(tokens, cache, torch.zeros(tokens.shape[0], dtype=torch.long))
    assert aux.shape == (2, 7, len(canonical_slots) * H)
    for s, k in enumerate(canonical_slots):
        torch.testing.assert_close(aux[..., s * H : (s + 1) * H], hs[k + 1], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- engine
def _engine(draft=None, n=8, new=24, spec=None, bs=8):
    return ToyEagle3Engine(
        draft_path=draft,
        spec=spec or SpecArgs("EAGLE3", 3, 1, None),
        batch_size=bs,
        max_new_tokens=new,
        num_prompts=n,
        seed=0,
    )


def _outputs(e):
    return [r.output_ids for r in sorted(e.finished, key=lambda r: int(r.rid.split("-")[1]))]


@pytest.mark.parametrize(
    "draft,spec",
    [
        (None, SpecArgs("EAGLE3", 3, 1, None)),
        (None, SpecArgs("EAGLE3", 1, 1, 16)),
        ("bad", SpecArgs("EAGLE3", 3, 1, None)),
        (None, SpecArgs("EAGLE", 2, 1, None)),
    ],
)
def test_speculative_output_equals_greedy(draft, spec):
    n, new = 6, 21
    e = _engine(paths.draft_ids_not_read_dir() if draft == "bad" else None, n=n, new=new, spec=spec, bs=4)
    e.run()
    ref = greedy_generate(e.target, make_prompts(n, 48, 0), new)[:, 48:]
    outs = _outputs(e)
    assert len(outs) == n and all(len(o) == new for o in outs)
    assert outs == ref.tolist()


def test_verify_result_shapes_and_fc_input():
    e = _engine(n=8, new=16)
    seen = []
    e.draft.model.fc.register_forward_pre_hook(lambda mod, args: seen.append(tuple(args[0].shape)))
    res = e.step()
    b = e.batch
    bs, N = 8, 4
    assert b.spec_info.draft_token.shape == (bs * N,)
    assert b.spec_info.retrieve_next_token[0].tolist() == [1, 2, 3, -1]
    assert b.spec_info.retrieve_next_sibling[0].tolist() == [-1] * N
    assert res.next_token_ids.shape == (bs * N,)
    assert res.accept_lens.dtype == torch.int32 and res.accept_lens.shape == (bs,)
    assert res.accept_index.shape == (bs, 4)
    assert res.logits_output.hidden_states.shape == (bs * N, 3 * 128)
    assert ((res.accept_index >= 0).sum(1) == res.accept_lens).all()
    # prefill extend rows then decode extend rows, each K*H wide
    assert seen == [(8, 48, 384), (8, 4, 384)]


def test_eagle_algorithm_skips_fc():
    e = _engine(n=4, new=8, spec=SpecArgs("EAGLE", 3, 1, None))
    calls = []
    e.draft.model.fc.register_forward_pre_hook(lambda *a: calls.append(1))
    res = e.step()
    assert not calls and e.target.capture_aux_hidden_states is False
    assert res.logits_output.hidden_states.shape[-1] == 128


def test_topk_gt1_refused():
    with pytest.raises(ValueError, match="topk"):
        _engine(spec=SpecArgs("EAGLE3", 3, 2, 6))


def test_server_args_and_wiring():
    e = _engine(paths.draft_ids_not_read_dir(), spec=SpecArgs("EAGLE3", 1, 1, 16))
    sa = e.server_args
    assert sa.requested.num_draft_tokens == 16 and sa.effective.num_draft_tokens == 2
    assert sa.rewrites[0]["param"] == "num_draft_tokens"
    assert e.spec_aux_ids is None and e.target.model.layers_to_capture == [2, 4, 5]
    e2 = _engine()
    assert e2.spec_aux_ids == [-1, 2, 5] and e2.target.model.layers_to_capture == [0, 3, 6]


def test_mean_accept_length_separates_wirings():
    good = _engine(n=16, new=48)
    good.run()
    bad = _engine(paths.draft_ids_not_read_dir(), n=16, new=48)
    bad.run()
    g, b = good.mean_accept_length(), bad.mean_accept_length()
    assert g >= 2.5, g
    assert b <= 1.6, b
