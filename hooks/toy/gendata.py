"""``eagle3-top toy gen-data``: the built-in target's hidden states in SpecForge's layout.

The same sequences the bundled draft was trained on (prompts from the workload, continued by the
target's own greedy decoding), written as SpecForge 0.2.0 writes them:
``rows_{start}-{end}/data_{i}.ckpt`` (or ``.ckpt.gz``) holding ``input_ids`` [S], ``loss_mask``
[S] (1 on generated tokens), ``hidden_state`` [1, S, H] (final-norm output) and
``aux_hidden_state`` [1, S, K*H] (the captured layers concatenated in ascending layer order, as
SGLang's capture produces them), in the target's storage dtype; plus
``vocab_mapping/vocab_mapping.pt`` with the draft's ``d2t``/``t2d``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
from typing import IO, TYPE_CHECKING, cast

from eagle3_top.tracer.argtypes import positive_int

# torch and the model load only once there is work to do: ``gen-data --help`` answers at once.
if TYPE_CHECKING:
    import torch


GROUP = 2000  # SpecForge's --file-group-size default
# The canonical layers the bundled draft was trained on: ``train.AUX_IDS``, spelled out because
# train imports torch at once and gen-data's --help must not (tests/test_manifest.py holds them equal).
DEFAULT_LAYERS = (-1, 2, 5)
# A comma-separated list of integers that starts with a minus sign: argparse would take it for an
# option ("--layers: expected one argument").
_NEGATIVE_LIST = re.compile(r"^-\d+(\s*,\s*-?\d+)*\s*,?$")
LIST_OPTIONS = ("--layers",)


def parse_layers(text: str) -> list[int]:
    try:
        layers = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"layers must be comma-separated integers, got {text!r}") from None
    if not layers:
        raise argparse.ArgumentTypeError("layers: give at least one layer id")
    return layers


def attach_list_values(argv: list[str], options: tuple[str, ...] = LIST_OPTIONS) -> list[str]:
    """``--layers -1,2,5`` as ``--layers=-1,2,5``, which argparse reads as meant."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.extend(argv[i:])
            break
        if arg in options and i + 1 < len(argv) and _NEGATIVE_LIST.match(argv[i + 1]):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def write_vocab_mapping(out: str, draft_path: str, vocab_size: int) -> None:
    import torch

    sd = torch.load(os.path.join(draft_path, "model.pt"), weights_only=True)
    d2t = next((v for k, v in sd.items() if k.endswith("d2t")), None)
    if d2t is None:
        return
    d2t = d2t.long()
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[d2t + torch.arange(d2t.shape[0])] = True
    os.makedirs(os.path.join(out, "vocab_mapping"), exist_ok=True)
    torch.save({"d2t": d2t, "t2d": t2d}, os.path.join(out, "vocab_mapping", "vocab_mapping.pt"))


def generate(
    out: str,
    *,
    num_samples: int,
    layers: list[int],
    prompt_len: int = 48,
    new_tokens: int = 96,
    seed: int = 7,
    compress: bool = False,
    dtype: torch.dtype | None = None,
    target_path: str | None = None,
    chunk: int = 64,
) -> int:
    """Write ``num_samples`` files under ``out``; ``dtype`` defaults to bfloat16 (SpecForge's)."""
    import torch

    from .paths import target_dir
    from .train import greedy_generate
    from .workload import make_sequences

    dtype = torch.bfloat16 if dtype is None else dtype
    from .model import load_target

    target = load_target(target_path or target_dir())
    n_layers = target.config.num_hidden_layers
    bad = [k for k in layers if not -1 <= k < n_layers]
    if bad:
        raise ValueError(
            f"layers {bad} out of range for a {n_layers}-layer target (canonical: -1 .. {n_layers - 1})"
        )
    order = sorted(set(layers))  # SGLang's capture: ascending, once per layer
    written = 0
    for start in range(0, num_samples, chunk):
        n = min(chunk, num_samples - start)
        prompts = make_sequences(n, prompt_len, seed + start)
        seqs = greedy_generate(target, prompts, new_tokens)
        hs, _logits = target.all_hidden_states(seqs)
        final = target.model.norm(hs[-1])
        aux = torch.cat([hs[k + 1] for k in order], dim=-1)
        mask = torch.zeros(seqs.shape[1], dtype=torch.long)
        mask[prompt_len:] = 1
        for j in range(n):
            idx = start + j
            group = (idx // GROUP) * GROUP
            d = os.path.join(out, f"rows_{group}-{group + GROUP}")
            os.makedirs(d, exist_ok=True)
            sample = {
                "input_ids": seqs[j].clone(),
                "loss_mask": mask.clone(),
                "hidden_state": final[j : j + 1].to(dtype).clone(),
                "aux_hidden_state": aux[j : j + 1].to(dtype).clone(),
            }
            path = os.path.join(d, f"data_{idx}.ckpt")
            if compress:
                with gzip.open(path + ".gz", "wb") as f:
                    torch.save(sample, cast(IO[bytes], f))  # GzipFile is a binary file object
            else:
                torch.save(sample, path)
            written += 1
    return written


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="eagle3-top toy gen-data", description=__doc__.splitlines()[0] if __doc__ else None
    )
    ap.add_argument("--out", required=True, help="output directory (SpecForge hidden_states layout)")
    ap.add_argument(
        "--layers",
        type=parse_layers,
        default=list(DEFAULT_LAYERS),
        help="canonical layer ids to capture, comma-separated (default: what the bundled draft was "
        "trained on, -1,2,5)",
    )
    ap.add_argument("--num-samples", type=positive_int, default=64)
    ap.add_argument("--prompt-len", type=positive_int, default=48)
    ap.add_argument("--new-tokens", type=positive_int, default=96)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--compress", action="store_true", help="write .ckpt.gz (SpecForge --compress)")
    ap.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    return ap


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(attach_list_values(list(sys.argv[1:] if argv is None else argv)))
    try:
        import torch

        from .model import ToyLlamaConfig
        from .paths import draft_dir, target_dir
    except ImportError as exc:
        print(
            f"eagle3-top toy gen-data: needs torch: {exc} (pip install 'eagle3-top[torch]')", file=sys.stderr
        )
        return 2
    torch.set_num_threads(1)  # as the engine: the toy is too small to share (see toy export)
    try:
        n = generate(
            ns.out,
            num_samples=ns.num_samples,
            layers=ns.layers,
            prompt_len=ns.prompt_len,
            new_tokens=ns.new_tokens,
            seed=ns.seed,
            compress=ns.compress,
            dtype=getattr(torch, ns.dtype),
        )
        write_vocab_mapping(ns.out, draft_dir(), ToyLlamaConfig.load(target_dir()).vocab_size)
    except (ValueError, OSError) as exc:
        print(f"eagle3-top toy gen-data: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} samples to {ns.out} (layers {sorted(set(ns.layers))}, ascending)")
    return 0
