"""A tiny random Llama target and a matching random EAGLE-3 draft, as Hugging Face directories.

usage: python3 mkmodels.py OUTROOT [tied]
``tied`` zeroes the final-norm weights of both, so target and draft always emit token 0 and every
draft token is accepted (accept length 4.0 with 3 steps): a known answer to check a tracer against.
Random weights give an accept length of about 1.03. The draft's aux ids are [1, 2, 3], so SGLang's
target captures its layers [2, 3, 4].
"""

from __future__ import annotations

import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

V, H, FFN, L, NH, NKV, DV = 1024, 256, 512, 6, 4, 4, 256
AUX = [1, 2, 3]


def main(root: str, tied: bool) -> None:
    tgt, drf = os.path.join(root, "tgt"), os.path.join(root, "draft")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=FFN, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)  # fmt: skip
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    if tied:
        with torch.no_grad():
            m.model.norm.weight.zero_()
    m.config.torch_dtype = "bfloat16"
    m.save_pretrained(tgt)
    os.makedirs(drf, exist_ok=True)
    dcfg = dict(architectures=["LlamaForCausalLMEagle3"], model_type="llama", hidden_size=H,
                intermediate_size=FFN, num_attention_heads=NH, num_key_value_heads=NKV,
                num_hidden_layers=1, vocab_size=V, draft_vocab_size=DV, max_position_embeddings=8192,
                rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False,
                torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, target_hidden_size=H,
                eagle_config={"eagle_aux_hidden_state_layer_ids": AUX, "use_aux_hidden_state": True})  # fmt: skip
    with open(os.path.join(drf, "config.json"), "w") as f:
        json.dump(dcfg, f, indent=1)
    g = torch.Generator().manual_seed(1)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    hd = H // NH
    w = {
        "fc.weight": rand(H, 3 * H),
        "midlayer.input_layernorm.weight": ones(H),
        "midlayer.hidden_norm.weight": ones(H),
        "midlayer.post_attention_layernorm.weight": ones(H),
        "midlayer.self_attn.q_proj.weight": rand(NH * hd, 2 * H),
        "midlayer.self_attn.k_proj.weight": rand(NKV * hd, 2 * H),
        "midlayer.self_attn.v_proj.weight": rand(NKV * hd, 2 * H),
        "midlayer.self_attn.o_proj.weight": rand(H, NH * hd),
        "midlayer.mlp.gate_proj.weight": rand(FFN, H),
        "midlayer.mlp.up_proj.weight": rand(FFN, H),
        "midlayer.mlp.down_proj.weight": rand(H, FFN),
        "norm.weight": torch.zeros(H, dtype=torch.bfloat16) if tied else ones(H),
        "lm_head.weight": rand(DV, H),
    }
    hot = torch.cat([torch.tensor([0]), torch.randperm(V - 1, generator=g)[: DV - 1] + 1]).sort().values
    w["d2t"] = (hot - torch.arange(DV)).to(torch.int64)  # draft id -> target id offset
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[hot] = True
    w["t2d"] = t2d
    save_file(w, os.path.join(drf, "model.safetensors"))
    print("made", tgt, drf, "tied" if tied else "random", "hot[:5]", hot[:5].tolist())


if __name__ == "__main__":
    main(sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "tied")
