"""`manifest build` over many SpecForge-format files against reading them (torch.load alone).

Files come from `eagle3-top toy gen-data` (the built-in target's hidden states, SpecForge layout),
in a temporary directory removed at the end, or kept under --dir for later runs. Both passes read the same files; the loader pass is a plain loop of
``torch.load(path, weights_only=True, mmap=True)`` that touches each tensor. Target: >= 0.8.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from benchmarks.common import machine


def ensure_files(directory: str, n: int) -> list[str]:
    from eagle3_top.hooks.toy.gendata import generate
    from eagle3_top.tracer.analysis.trainfiles import find_training_files

    files = find_training_files(directory) if os.path.isdir(directory) else []
    if len(files) < n:
        t0 = time.perf_counter()
        generate(directory, num_samples=n, layers=[-1, 2, 5], prompt_len=32, new_tokens=32, chunk=256)
        print(f"  generated {n} files in {time.perf_counter() - t0:.0f}s")
        files = find_training_files(directory)
    return files[:n]


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument(
        "--dir",
        default=None,
        help="keep the generated files here and reuse them in later runs (default: a temporary "
        "directory, removed at the end: 10,000 files are 600 MB)",
    )
    ns = ap.parse_args(argv)
    if ns.dir is not None:
        return _measure(ns.dir, ns.files)
    with tempfile.TemporaryDirectory(prefix="eagle3-top-bench-manifest-") as d:
        return _measure(d, ns.files)


def _measure(directory: str, n: int) -> dict[str, float]:
    import torch
    from eagle3_top.hooks.toy.paths import draft_dir, target_dir
    from eagle3_top.tracer.analysis.manifest_build import build_manifest

    torch.set_num_threads(1)
    print(f"# bench_manifest: {n} SpecForge-format files, on {machine()}")
    files = ensure_files(directory, n)
    # warm the page cache for both passes alike
    for p in files:
        with open(p, "rb") as f:
            f.read()
    t0 = time.perf_counter()
    rows = 0
    for p in files:
        d = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
        rows += int(d["aux_hidden_state"].float().sum().isfinite())  # touch the data
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = build_manifest(draft_dir=draft_dir(), data=directory, target_config=target_dir(), max_files=None)
    t_build = time.perf_counter() - t0
    assert m.reference.files == len(files), "bench dir holds other files"
    print(f"  torch.load alone   {len(files) / t_load:9.0f} files/s ({t_load:.1f}s)")
    print(f"  manifest build     {len(files) / t_build:9.0f} files/s ({t_build:.1f}s)")
    print(f"  build / load speed: {t_load / t_build:.3f}  (target >= 0.8)")
    return {
        "load_files_per_s": len(files) / t_load,
        "build_files_per_s": len(files) / t_build,
        "ratio": t_load / t_build,
    }


if __name__ == "__main__":
    main()
