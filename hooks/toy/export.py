"""``eagle3-top toy export --out DIR``: the built-in target and every bundled draft as directories
that SGLang and Hugging Face load, and the built-in workload with the engine's own answers.

    DIR/target/                   config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
                                  generation_config.json
    DIR/target-qwen2/             the same target as a Qwen2 model (q/k/v biases of zero: the same
                                  function), to serve through SGLang's Qwen2 code path: config.json,
                                  model.safetensors, generation_config.json and no tokenizer: serve it
                                  with --tokenizer-path DIR/target (transformers 5 loads any qwen2
                                  directory's tokenizer as Qwen2Tokenizer, whatever tokenizer_config.json
                                  says, and that one drops the language's words: SGLang's warm-up prompt
                                  became zero tokens, which crashed 0.5.17)
    DIR/<draft>/                  config.json, model.safetensors, training_metrics.json (one per draft)
    DIR/<draft>.manifest.json     the training manifest of each trained draft (its mis-wired copy
                                  was trained the same way), for check and probe against a server
    DIR/workload.json             the prompts, the built-in engine's greedy continuations, and the
                                  accept length the built-in engine reaches with each draft on them

Weights are written with safetensors (no pickle) in the dtype they are bundled in (fp16). Every
config states its stop token: the built-in language has no end token, and a config without
``eos_token_id`` gets transformers' default, 2, which is the language's separator ``|``, so a server
would stop at the first one. The stop token named is ``<unk>`` (id 8), which the language never uses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from .model import load_target
from .paths import target_dir, weights_dir
from .train import DRAFTS, greedy_generate
from .workload import BOS, make_prompts

STOP_TOKEN_ID = 8  # <unk>: never in the language, so generation runs to max_new_tokens
DEFAULT_PROMPTS = 64
DEFAULT_NEW_TOKENS = 96
PROMPT_LEN = 48


def bundled_drafts() -> list[str]:
    """Every bundled draft directory's name: each draft and its mis-wired copy."""
    return [name for good, (_, bad) in DRAFTS.items() for name in (good, bad)]


def _config(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "config.json")) as f:
        cfg: dict[str, Any] = json.load(f)
    cfg.update(bos_token_id=BOS, eos_token_id=STOP_TOKEN_ID, pad_token_id=STOP_TOKEN_ID)
    return cfg


def _write_json(path: str, obj: Any) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def _write_model(src: str, dst: str, config: dict[str, Any], *, draft: bool = False) -> None:
    from safetensors.torch import save_file

    os.makedirs(dst)
    sd = torch.load(os.path.join(src, "model.pt"), weights_only=True)
    if draft:
        sd = {draft_tensor_name(k): v for k, v in sd.items()}
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(dst, "model.safetensors"))
    _write_json(os.path.join(dst, "config.json"), config)


def draft_tensor_name(name: str) -> str:
    """A draft tensor's name as SpecForge writes it (``fc.weight``, ``layers.0.*``, ``norm.weight``,
    ``lm_head.weight``, ``d2t``): vLLM's EAGLE-3 loader prefixes ``model.`` itself and refuses
    ``model.fc.weight``; SGLang's accepts both."""
    return name.removeprefix("model.")


def export_target(out: str) -> str:
    dst = os.path.join(out, "target")
    src = target_dir()
    _write_model(src, dst, _config(src))
    shutil.copyfile(os.path.join(src, "tokenizer.json"), os.path.join(dst, "tokenizer.json"))
    _write_json(
        os.path.join(dst, "tokenizer_config.json"),
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<bos>",
            "eos_token": "<unk>",
            "unk_token": "<unk>",
            "pad_token": "<unk>",
            "add_bos_token": False,  # the workload's prompts carry their own <bos>
            "model_max_length": 512,
        },
    )
    _write_json(
        os.path.join(dst, "generation_config.json"),
        {
            "bos_token_id": BOS,
            "eos_token_id": STOP_TOKEN_ID,
            "pad_token_id": STOP_TOKEN_ID,
            "do_sample": False,
        },
    )
    return dst


QWEN2_TARGET = "target-qwen2"


def export_target_qwen2(out: str) -> str:
    """The target as ``Qwen2ForCausalLM``: Qwen2 is Llama with q/k/v biases, so zero biases give
    the same function through another model class of the server (SGLang releases differ per class
    in what they do with an EAGLE-3 embedding slot)."""
    from safetensors.torch import load_file, save_file

    src, dst = os.path.join(out, "target"), os.path.join(out, QWEN2_TARGET)
    # no tokenizer files: a server started without --tokenizer-path refuses at once, instead of
    # serving text through a tokenizer that silently drops words
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("tokenizer*"))
    cfg = _config(target_dir())
    cfg.update(
        architectures=["Qwen2ForCausalLM"],
        model_type="qwen2",
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=cfg["num_hidden_layers"],
    )
    _write_json(os.path.join(dst, "config.json"), cfg)
    sd = load_file(os.path.join(src, "model.safetensors"))
    for i in range(cfg["num_hidden_layers"]):
        for proj in "qkv":
            w = sd[f"model.layers.{i}.self_attn.{proj}_proj.weight"]
            sd[f"model.layers.{i}.self_attn.{proj}_proj.bias"] = torch.zeros(w.shape[0], dtype=w.dtype)
    save_file(sd, os.path.join(dst, "model.safetensors"))
    return dst


def export_draft(
    out: str, name: str, as_name: str | None = None, top_level_ids: list[int] | None = None
) -> str:
    """A bundled draft as ``out/as_name``; ``top_level_ids``: also write ids at the config's top level
    (where vLLM reads them first and SGLang never does)."""
    src, dst = os.path.join(weights_dir(), name), os.path.join(out, as_name or name)
    config = _config(src)
    if top_level_ids is not None:
        config[TOP_LEVEL_KEY] = list(top_level_ids)
    _write_model(src, dst, config, draft=True)
    shutil.copyfile(os.path.join(src, "training_metrics.json"), os.path.join(dst, "training_metrics.json"))
    return dst


TOP_LEVEL_KEY = "eagle_aux_hidden_state_layer_ids"
FOR_VLLM = "-vllm"  # a trained draft with vLLM-convention ids at the top level: right on both engines


def vllm_drafts() -> dict[str, str]:
    """``{directory: bundled draft}`` of the copies written for vLLM."""
    return {good + FOR_VLLM: good for good in DRAFTS}


def vllm_ids(trained: list[int], num_layers: int) -> list[int]:
    """The ids vLLM needs at the top level to capture the trained (canonical) layers, by its rules."""
    from eagle3_top.tracer.engines.base import ids_for
    from eagle3_top.tracer.engines.vllm import ENGINE

    ids = ids_for(ENGINE, ENGINE.family(None), trained, num_layers)
    if ids is None:
        raise ValueError(f"vLLM cannot capture canonical {trained}")
    return ids


def conventions(out: str, names: list[str], num_layers: int) -> dict[str, Any]:
    """For each exported draft: the ids it writes where, in which convention, and which layers each
    engine serves from them (by the engines' own rules), against the layers it was trained on."""
    from eagle3_top.tracer.engines import engine

    trained_of = {**{g: ids for g, (ids, _) in DRAFTS.items()}, **{b: ids for ids, b in DRAFTS.values()}}
    trained_of.update({v: trained_of[g] for v, g in vllm_drafts().items()})
    out_map: dict[str, Any] = {}
    for name in names:
        with open(os.path.join(out, name, "config.json")) as f:
            cfg = json.load(f)
        trained = trained_of[name]
        written = {}
        nested = (cfg.get("eagle_config") or {}).get(TOP_LEVEL_KEY)
        if nested is not None:
            written["eagle_config"] = {
                "ids": nested,
                "convention": "sglang (canonical: k = block k's output)",
            }
        top = cfg.get(TOP_LEVEL_KEY)
        if top is not None:
            conv = (
                "vllm (k = the input of layer k = canonical + 1)"
                if name.endswith(FOR_VLLM)
                else "sglang (canonical)"
            )
            written["top_level"] = {"ids": top, "convention": conv}
        served = {}
        for ename in ("sglang", "vllm"):
            e = engine(ename)
            assert e is not None
            fam = e.family("LlamaForCausalLM")
            got = e.capture(fam, e.native_from_ids(fam, e.read_ids(cfg).ids, num_layers), num_layers)
            served[ename] = {
                "reads": e.read_ids(cfg).declared_at,
                "serves_canonical": got.canonical,
                "right": got.canonical == trained and got.failure is None,
                **({"fails": got.failure} if got.failure else {}),
            }
        out_map[name] = {"trained_canonical": trained, "ids_written": written, "engines": served}
    return out_map


def workload(prompts: int, new_tokens: int) -> dict[str, Any]:
    """The built-in workload's first ``prompts`` prompts and the built-in engine's greedy answer to
    each (its target in fp32, as the engine runs it)."""
    target = load_target(target_dir())
    p = make_prompts(prompts, PROMPT_LEN)
    with torch.no_grad():
        out = greedy_generate(target, p, new_tokens)[:, PROMPT_LEN:]
    return {
        "prompt_len": PROMPT_LEN,
        "new_tokens": new_tokens,
        "stop_token_id": STOP_TOKEN_ID,
        "answered_by": "the built-in engine's target, fp32, greedy, no speculation",
        "note": "fp16/bf16 servers break near-ties differently: compare token agreement, not equality",
        "prompts": p.tolist(),
        "continuations": out.tolist(),
    }


REFERENCE_SPEC = (3, 1, 4)  # steps, topk, draft tokens: the chain the served comparison uses
CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]  # by module name: the engine imports nothing of it


def built_in_accept_lengths(
    prompts: int, new_tokens: int, say: Callable[[str], None] = lambda _s: None
) -> dict[str, float]:
    """The accept length the built-in engine reaches with each bundled draft on the workload
    (request-steps' mean, as SGLang's completion_tokens / spec_verify_ct per request averages)."""
    from .engine import ToyEagle3Engine
    from .spec_args import SpecArgs

    steps, topk, ndt = REFERENCE_SPEC
    out = {}
    for name in bundled_drafts():
        say(f"the built-in engine's accept length with {name}")
        engine = ToyEagle3Engine(
            draft_path=os.path.join(weights_dir(), name),
            spec=SpecArgs("EAGLE3", steps, topk, ndt),
            num_prompts=prompts,
            max_new_tokens=new_tokens,
            prompt_len=PROMPT_LEN,
            batch_size=16,
        )
        out[name] = round(float(engine.run()["mean_accept_length"]), 4)
    return out


class Progress:
    """One line on stderr per stage, with the seconds since the export began: the stages take from
    a second to minutes on a busy machine, and a silent command looks hung."""

    def __init__(self, prog: str) -> None:
        self.prog, self.t0 = prog, time.monotonic()

    def __call__(self, what: str) -> None:
        print(f"{self.prog}: [{time.monotonic() - self.t0:5.1f}s] {what}", file=sys.stderr, flush=True)


def write_manifests(out: str, say: Callable[[str], None] = lambda _s: None) -> list[str]:
    """``DIR/<draft>.manifest.json`` for each trained draft, built as a user builds one: the real
    ``toy gen-data`` and ``manifest build`` commands on the exported directories."""
    written = []
    for name, (ids, _) in DRAFTS.items():
        say(f"{name}: its training manifest (toy gen-data, then manifest build, as a user runs them)")
        ddir, path = os.path.join(out, name), os.path.join(out, f"{name}.manifest.json")
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "hidden_states")
            layers = "--layers=" + ",".join(map(str, ids))
            subprocess.run([*CLI, "toy", "gen-data", "--out", data, layers, "--num-samples", "16"],
                           check=True, capture_output=True)  # fmt: skip
            subprocess.run(
                [*CLI, "manifest", "build", "--draft", ddir, "--data", data, "--target-config",
                 os.path.join(out, "target"), "--metrics", os.path.join(ddir, "training_metrics.json"),
                 "--out", path],
                check=True, capture_output=True,
            )  # fmt: skip
        written.append(path)
    return written


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eagle3-top toy export",
        description="Write the built-in target and drafts as Hugging Face directories (safetensors) "
        "that SGLang serves, with the built-in workload and the engine's answers.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory")
    p.add_argument("--force", action="store_true", help="replace what an earlier export wrote in DIR")
    p.add_argument("--prompts", type=int, default=DEFAULT_PROMPTS, help=f"default {DEFAULT_PROMPTS}")
    p.add_argument("--new-tokens", type=int, default=DEFAULT_NEW_TOKENS, help=f"default {DEFAULT_NEW_TOKENS}")
    p.add_argument(
        "--models-only",
        action="store_true",
        help="the model directories alone: no manifests, no workload.json (a few seconds instead of ~40)",
    )
    return p


def launch_hint(out: str) -> str:
    return (
        f"python -m sglang.launch_server --model-path {out}/target "
        f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {out}/draft-no-embed "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
        "--attention-backend triton --dtype float16"
    )


def vllm_launch_hint(out: str) -> str:
    spec = json.dumps(
        {"method": "eagle3", "model": f"{out}/draft-no-embed{FOR_VLLM}", "num_speculative_tokens": 3}
    )
    return (
        f"python -m vllm.entrypoints.openai.api_server --model {out}/target "
        f"--speculative-config '{spec}' --max-model-len 512"
    )


def main(argv: list[str]) -> int:
    ns = build_parser().parse_args(argv)
    prog = "eagle3-top toy export"
    if ns.prompts < 1 or ns.new_tokens < 1:
        print(f"{prog}: --prompts and --new-tokens must be at least 1", file=sys.stderr)
        return 2
    out = os.path.abspath(ns.out)
    if os.path.exists(out) and not os.path.isdir(out):
        print(f"{prog}: {ns.out} exists and is not a directory", file=sys.stderr)
        return 2
    ours = [
        "target",
        QWEN2_TARGET,
        *bundled_drafts(),
        *vllm_drafts(),
        "drafts.json",
        "workload.json",
        *(f"{n}.manifest.json" for n in DRAFTS),
    ]
    if os.path.isdir(out) and os.listdir(out):
        if not ns.force:
            print(
                f"{prog}: {ns.out} is not empty (--force replaces what an export writes there)",
                file=sys.stderr,
            )
            return 2
        for name in ours:  # only these: --force never empties a directory it did not fill
            path = os.path.join(out, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.remove(path)
    os.makedirs(out, exist_ok=True)
    # One thread, as the engine runs: the toy's matrices are too small to share, and on a loaded
    # box a second thread waiting at every op's barrier for a core doubled the wall time (48 s
    # against 24 s here, at a load of 3; the campaign saw 16 minutes for 2 of CPU).
    torch.set_num_threads(1)
    say = Progress(prog)
    say("the target and the drafts (safetensors)")
    drafts = [export_draft(out, name) for name in bundled_drafts()]
    num_layers = int(_config(target_dir())["num_hidden_layers"])
    drafts += [
        export_draft(out, good, as_name=name, top_level_ids=vllm_ids(DRAFTS[good][0], num_layers))
        for name, good in vllm_drafts().items()
    ]
    written = [export_target(out), export_target_qwen2(out), *drafts]
    table = conventions(out, [os.path.basename(d) for d in drafts], num_layers)
    _write_json(os.path.join(out, "drafts.json"), table)
    written.append(os.path.join(out, "drafts.json"))
    if not ns.models_only:
        try:
            written += write_manifests(out, say)
        except subprocess.CalledProcessError as exc:
            err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
            print(f"{prog}: building a manifest failed: {err[-1] if err else exc}", file=sys.stderr)
            return 1
        say(f"the workload: {ns.prompts} prompts and the target's greedy answers of {ns.new_tokens} tokens")
        work = workload(ns.prompts, ns.new_tokens)
        work["built_in_accept_length"] = built_in_accept_lengths(ns.prompts, ns.new_tokens, say)
        work["built_in_spec"] = dict(
            zip(("num_steps", "topk", "num_draft_tokens"), REFERENCE_SPEC, strict=True)
        )
        _write_json(os.path.join(out, "workload.json"), work)
        written.append(os.path.join(out, "workload.json"))
    say("done")
    for d in written:
        print(d)
    for name, row in table.items():
        right = [e for e, v in row["engines"].items() if v["right"]]
        print(f"{name}: " + "; ".join(f"{w} ids {v['ids']} in {v['convention']}" for w, v in row["ids_written"].items())
              + f" -> serves the trained layers on {' and '.join(right) if right else 'neither engine'}", file=sys.stderr)  # fmt: skip
    print(f"serve the healthy pair with:\n  {launch_hint(out)}", file=sys.stderr)
    print(f"on vLLM:\n  {vllm_launch_hint(out)}", file=sys.stderr)
    print(
        f"(the Qwen2 copy: --model-path {out}/{QWEN2_TARGET} --tokenizer-path {out}/target)", file=sys.stderr
    )
    return 0
