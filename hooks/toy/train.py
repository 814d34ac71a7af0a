"""Train the toy target and its EAGLE-3 draft, deterministically, on CPU.

    python -m eagle3_top.hooks.toy.train --out hooks/toy/weights
    python -m eagle3_top.hooks.toy.train --keep-target --drafts draft-no-embed   # one draft, same target

Target: the reference's v2 recipe (700 steps, batch 16 x 129, AdamW lr 3e-3, no weight decay);
this grows the residual stream to RMS 3.7-47 against an embedding output of ~0.06, which is what
makes a draft served the wrong layers fail. Draft (300 steps, AdamW lr 1e-2, decoupled weight decay
2.0 — the decay keeps fc's weights small on the large-input slots, so the tiny embedding slot ends up
with ~8x larger weights and a wrongly wired large vector there swamps fc's output): trained on the target's own
hidden states at canonical layers ``[-1, 2, 5]`` (canonical k = output of 0-based block k,
-1 = embedding output; the second draft, ``draft-no-embed``, at ``[0, 2, 5]``), labels = the target's greedy predictions on sequences it generated itself,
with EAGLE-3 training-time test (3 unrolled steps, the draft's own hidden output fed back).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time

import torch
import torch.nn.functional as F

from .draft import Eagle3DecoderLayer, ToyEagle3Config, ToyEagle3Draft
from .model import ToyLlamaConfig, ToyLlamaForCausalLM, load_target
from .workload import make_sequences, sequence_stream

AUX_IDS = [-1, 2, 5]
# The bundled drafts: directory -> (the canonical layers it trains on, the directory of its
# mis-wired copy: the same weights with the ids at the config's top level, where SGLang never reads
# them, so the server falls back to its default layers [1, 3, 4]). The second avoids the embedding
# (-1): SGLang 0.5.17-0.5.21 mishandle that slot (docs/sglang-releases.md), and it is still apart
# from the default layers, so the layer findings name its mis-wired copy (whose acceptance barely
# drops, 3.81 -> 3.73: neighbouring blocks carry similar states; [0, 5, 6] drops no further, 3.65).
DRAFTS: dict[str, tuple[list[int], str]] = {
    "draft": (AUX_IDS, "draft-ids-not-read"),
    "draft-no-embed": ([0, 2, 5], "draft-no-embed-ids-not-read"),
}


def _lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train_target(
    cfg: ToyLlamaConfig,
    steps: int,
    batch: int,
    seq_len: int,
    seed: int,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    log=print,
):
    torch.manual_seed(seed)
    model = ToyLlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    data = sequence_stream(batch, seq_len, seed)
    for step in range(steps):
        x = next(data)
        for g in opt.param_groups:
            g["lr"] = _lr(step, steps, lr, 30)
        _, logits = model.all_hidden_states(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            log(f"target step {step} loss {loss.item():.4f}")
    return model.eval()


@torch.no_grad()
def greedy_generate(model: ToyLlamaForCausalLM, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Plain greedy decoding with the KV cache (no speculation)."""
    B, L = prompts.shape
    cache = model.new_cache(B, L + new_tokens + 1)
    lens = torch.zeros(B, dtype=torch.long)
    logits, _ = model(prompts, cache, lens)
    lens = lens + L
    out = [prompts]
    tok = logits[:, -1].argmax(-1)
    for i in range(new_tokens):
        out.append(tok[:, None])
        if i == new_tokens - 1:
            break
        logits, _ = model(tok[:, None], cache, lens)
        lens = lens + 1
        tok = logits[:, -1].argmax(-1)
    return torch.cat(out, dim=1)


@torch.no_grad()
def build_draft_data(
    target, n: int, prompt_len: int, seq_len: int, seed: int, aux_ids: list[int] = AUX_IDS, chunk: int = 128
):
    """Sequences the target generated itself, their aux states at canonical ``aux_ids`` and labels."""
    prompts = make_sequences(n, prompt_len, seed)
    seqs, aux, labels = [], [], []
    for i in range(0, n, chunk):
        s = greedy_generate(target, prompts[i : i + chunk], seq_len - prompt_len)
        hs, logits = target.all_hidden_states(s)
        seqs.append(s)
        aux.append(torch.cat([hs[k + 1] for k in aux_ids], dim=-1))
        labels.append(logits.argmax(-1))
    return torch.cat(seqs), torch.cat(aux), torch.cat(labels)


def ttt_forward(draft: ToyEagle3Draft, embed, aux, x, steps: int = 3):
    """EAGLE-3 training-time test. Row p of step k: embedding of x[p+1+k], hidden = fc(aux[p]) for
    k=0 else the draft's own previous pre-norm output; position p+k; attends to step-0 keys at
    positions <= p plus its own row's keys from steps 1..k. Returns a list of draft-vocab logits."""
    B, T, _ = aux.shape
    layer = draft.model.layers[0]
    assert isinstance(layer, Eagle3DecoderLayer)  # ModuleList indexing is typed as plain Module
    attn = layer.self_attn
    nh, hd = attn.heads, attn.head_dim
    from .model import apply_rope, rope_cos_sin

    h = draft.model.fc(aux)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    K0: torch.Tensor | None = None
    V0: torch.Tensor | None = None
    Ks, Vs, outs = [], [], []
    for k in range(steps):
        ids = F.pad(x[:, 1 + k :], (0, 1 + k))
        inp = layer.attn_input(embed(ids), h)
        q = attn.q_proj(inp).view(B, T, nh, hd)
        kk = attn.k_proj(inp).view(B, T, nh, hd)
        v = attn.v_proj(inp).view(B, T, nh, hd)
        cos, sin = rope_cos_sin(torch.arange(T)[None] + k, hd, attn.theta)
        q, kk = apply_rope(q, cos, sin), apply_rope(kk, cos, sin)
        q, kk, v = q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2)  # [B,h,T,d]
        if k == 0:
            K0, V0 = kk, v
            o = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        else:
            assert K0 is not None and V0 is not None  # set at k == 0
            Ks.append(kk)
            Vs.append(v)
            s0 = (q @ K0.transpose(-1, -2)) / math.sqrt(hd)
            s0 = s0.masked_fill(~causal, float("-inf"))
            sd = [((q * Kj).sum(-1, keepdim=True)) / math.sqrt(hd) for Kj in Ks]
            w = torch.softmax(torch.cat([s0, *sd], dim=-1), dim=-1)
            o = w[..., :T] @ V0
            for j, Vj in enumerate(Vs):
                o = o + w[..., T + j : T + j + 1] * Vj
        o = attn.o_proj(o.transpose(1, 2).reshape(B, T, -1))
        hid = h + o
        hid = hid + layer.mlp(layer.post_attention_layernorm(hid))
        outs.append(draft.lm_head(draft.model.norm(hid)))
        h = hid
    return outs


def draft_targets(labels, t2d, steps):
    """Per step k: draft-vocab label of row p = t2d[labels[p+1+k]] (-100 when out of range/vocab)."""
    out = []
    for k in range(steps):
        y = F.pad(t2d[labels[:, 1 + k :]], (0, 1 + k), value=-100)
        out.append(y)
    return out


@torch.no_grad()
def eval_draft(draft, embed, x, aux, labels, t2d, prompt_len, steps=3):
    outs = ttt_forward(draft, embed, aux, x, steps)
    ys = draft_targets(labels, t2d, steps)
    # rows standing for decode positions: the generated part of the sequence
    T = x.shape[1]
    valid = torch.zeros(T, dtype=torch.bool)
    valid[prompt_len - 1 : T - steps - 1] = True
    n_valid = int(valid.sum())
    acc, chain = [], torch.ones(x.shape[0], n_valid, dtype=torch.bool)
    sim = torch.ones(x.shape[0], n_valid)
    for k in range(steps):
        ok = (outs[k].argmax(-1) == ys[k])[:, valid]
        acc.append(ok.float().mean().item())
        chain = chain & ok
        sim = sim + chain.float()
    return {"acc": acc, "simulated_accept_length": sim.mean().item()}


def train_draft(
    target,
    dcfg: ToyEagle3Config,
    data,
    steps: int,
    batch: int,
    seed: int,
    prompt_len: int,
    lr: float = 1e-2,
    weight_decay: float = 0.0,
    log=print,
):
    seqs, aux, labels = data
    n_eval = 128
    tr = (seqs[n_eval:], aux[n_eval:], labels[n_eval:])
    ev = (seqs[:n_eval], aux[:n_eval], labels[:n_eval])
    V, Dv = dcfg.vocab_size, dcfg.draft_vocab_size
    counts = torch.bincount(tr[2].reshape(-1), minlength=V)
    hot = torch.sort(torch.argsort(counts, descending=True, stable=True)[:Dv]).values
    t2d = torch.full((V,), -100, dtype=torch.long)
    t2d[hot] = torch.arange(Dv)
    torch.manual_seed(seed + 1)
    draft = ToyEagle3Draft(dcfg)
    for m in draft.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, std=0.02)
    draft.set_d2t(hot - torch.arange(Dv))
    embed = target.model.embed_tokens
    embed.requires_grad_(False)
    draft.set_embed(embed)
    with torch.no_grad():
        draft.lm_head.weight.copy_(target.lm_head.weight[hot])
    params = [p for n, p in draft.named_parameters() if not n.startswith("model.embed_tokens")]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed + 2)
    N = tr[0].shape[0]
    for step in range(steps):
        idx = torch.randint(0, N, (batch,), generator=g)
        x, a, lab = tr[0][idx], tr[1][idx], tr[2][idx]
        for gr in opt.param_groups:
            gr["lr"] = _lr(step, steps, lr, 20)
        outs = ttt_forward(draft, embed, a, x)
        ys = draft_targets(lab, t2d, len(outs))
        loss = sum(
            (0.8**k) * F.cross_entropy(o.reshape(-1, Dv), y.reshape(-1), ignore_index=-100)
            for k, (o, y) in enumerate(zip(outs, ys, strict=True))
        )
        assert isinstance(loss, torch.Tensor)  # outs is non-empty, so sum() is never the int 0
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            log(f"draft step {step} loss {loss.item():.4f}")
    metrics = eval_draft(draft, embed, *ev, t2d, prompt_len)
    log(f"draft eval {metrics}")
    return draft, metrics


def _save_fp16(sd: dict, path: str) -> None:
    torch.save({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in sd.items()}, path)


def save_draft(out: str, name: str, draft: ToyEagle3Draft, dcfg: ToyEagle3Config, metrics: dict) -> None:
    """The draft in ``out/name`` and its mis-wired copy beside it (same weights and metrics: the
    copy claims what the draft reached in training, as a real mis-deployed draft would)."""
    ids, bad_name = DRAFTS[name]
    sd = {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens.")}
    ddir, bad = os.path.join(out, name), os.path.join(out, bad_name)
    for d in (ddir, bad):
        os.makedirs(d, exist_ok=True)
    _save_fp16(sd, os.path.join(ddir, "model.pt"))
    shutil.copyfile(os.path.join(ddir, "model.pt"), os.path.join(bad, "model.pt"))
    good_cfg = dcfg.to_dict()
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(good_cfg, f, indent=2)
    bad_cfg = dict(good_cfg)
    bad_cfg["eagle_config"] = {"use_aux_hidden_state": True}
    bad_cfg["eagle_aux_hidden_state_layer_ids"] = list(ids)
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(bad_cfg, f, indent=2)
    for d in (ddir, bad):
        with open(os.path.join(d, "training_metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "weights"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-steps", type=int, default=700)
    ap.add_argument("--target-batch", type=int, default=16)
    ap.add_argument("--target-lr", type=float, default=3e-3)
    ap.add_argument("--target-wd", type=float, default=0.0)
    ap.add_argument("--draft-steps", type=int, default=300)
    ap.add_argument("--draft-batch", type=int, default=32)
    ap.add_argument("--draft-lr", type=float, default=1e-2)
    ap.add_argument("--draft-wd", type=float, default=2.0)
    ap.add_argument("--draft-sequences", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--drafts",
        nargs="+",
        choices=sorted(DRAFTS),
        default=list(DRAFTS),
        help="which drafts to train (default: all)",
    )
    ap.add_argument(
        "--keep-target",
        action="store_true",
        help="train only the drafts, on the target already in --out (its metrics keep the target's "
        "recorded training time)",
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    seq_len, prompt_len = 129, 48
    cfg = ToyLlamaConfig()
    tdir = os.path.join(a.out, "target")
    if a.keep_target:
        with open(os.path.join(a.out, "draft", "training_metrics.json")) as f:
            t_target = json.load(f)["target_train_seconds"]
    else:
        t0 = time.time()
        target = train_target(cfg, a.target_steps, a.target_batch, seq_len, a.seed, a.target_lr, a.target_wd)
        t_target = round(time.time() - t0, 1)
        os.makedirs(tdir, exist_ok=True)
        cfg.save(tdir)
        _save_fp16(target.state_dict(), os.path.join(tdir, "model.pt"))
    # the draft trains on what the served (fp16-stored) target produces
    target = load_target(tdir)
    dcfg = ToyEagle3Config(
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        vocab_size=cfg.vocab_size,
        target_hidden_size=cfg.hidden_size,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
    )
    for name in a.drafts:
        ids = DRAFTS[name][0]
        t1 = time.time()
        data = build_draft_data(target, a.draft_sequences, prompt_len, seq_len, a.seed + 7, ids)
        dcfg.eagle_config = {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}
        draft, metrics = train_draft(
            target,
            dcfg,
            data,
            a.draft_steps,
            a.draft_batch,
            a.seed,
            prompt_len,
            lr=a.draft_lr,
            weight_decay=a.draft_wd,
        )
        metrics.update(
            aux_layer_ids_canonical=list(ids),
            ttt_steps=3,
            target_train_seconds=t_target,
            draft_train_seconds=round(time.time() - t1, 1),
            target_steps=a.target_steps,
            target_batch=a.target_batch,
            target_lr=a.target_lr,
            target_wd=a.target_wd,
            draft_steps=a.draft_steps,
            draft_batch=a.draft_batch,
            draft_lr=a.draft_lr,
            draft_wd=a.draft_wd,
            draft_sequences=a.draft_sequences,
            seed=a.seed,
        )
        save_draft(a.out, name, draft, dcfg, metrics)
        print(json.dumps({"draft": name, **metrics}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
