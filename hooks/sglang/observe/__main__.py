"""The observer's command line: JSON on stdout (a list of case results, one row per case as
``observe`` returns them), progress on stderr.

    python -m eagle3_top.hooks.sglang.observe --target-config T.json --draft-config D.json [--case NAME ...]
    python -m eagle3_top.hooks.sglang.observe --matrix [--config-dir tests/data/published]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from eagle3_top.hooks.sglang.observe import CASES, GIVEN, _blank_row, _say, given_case, observe
from eagle3_top.hooks.sglang.observe.configs import ARCHITECTURES, _load, default_draft_config, matrix_config
from eagle3_top.hooks.sglang.observe.errors import _READY, _error
from eagle3_top.hooks.sglang.observe.harness import _prepare_process
from eagle3_top.hooks.sglang.observe.shrink import N_LAYERS


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eagle3_top.hooks.sglang.observe",
        description="Observe which layer each EAGLE-3 aux slot really holds on the installed SGLang "
        "(tiny target, real model code, CPU).",
    )
    p.add_argument("--target-config", help="the target's config.json (full size; it is shrunk)")
    p.add_argument("--draft-config", help="the draft's config.json (default: a SpecForge Llama draft)")
    p.add_argument(
        "--case",
        action="append",
        choices=[*CASES, GIVEN],
        help=f"a case to run (repeatable; default all); {GIVEN}: the draft config's own ids, on the target "
        "at its own depth (what preflight asks)",
    )
    p.add_argument("--matrix", action="store_true", help="every known architecture x every case")
    p.add_argument("--arch", action="append", choices=list(ARCHITECTURES), help="with --matrix: only these")
    p.add_argument(
        "--config-dir",
        help="with --matrix: take each architecture's target (and draft) config from the published "
        "*-target.json / *-draft.json files here (e.g. tests/data/published); transformers' defaults otherwise",
    )
    p.add_argument(
        "--native-path",
        action="store_true",
        help="control: leave norms and activations on SGLang's native CPU path (no in-place kernels)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="keep SGLang's own logging and warnings; tracebacks of errors"
    )
    a = p.parse_args(argv)
    if a.matrix == bool(a.target_config):
        p.error("give --target-config (and --draft-config), or --matrix (built-in configs)")
    draft = _load(a.draft_config) if a.draft_config else default_draft_config()
    cases = a.case or list(CASES)
    cuda = not a.native_path
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
        # the stand-ins before transformers: it decides once which optional packages exist
        _READY["traceback"] = a.verbose
        _prepare_process(quiet=not a.verbose)
        if a.matrix:
            for arch in a.arch or list(ARCHITECTURES):
                try:
                    target, found_draft, source = matrix_config(arch, a.config_dir)
                except Exception as exc:  # ours: no config to observe it with
                    err, _ = _error(exc, harness_step="finding the architecture's config")
                    version = _prepare_process(quiet=not a.verbose)
                    for name in cases:
                        case = given_case(draft) if name == GIVEN else CASES[name]
                        rows.append({**_blank_row(version, arch, name, case, N_LAYERS), "setup_error": err})
                        _say(f"[{version}] {arch} {name}: setup error: {err}")
                    continue
                rows += observe(
                    target,
                    draft if a.draft_config or found_draft is None else found_draft,
                    cases=cases,
                    quiet=not a.verbose,
                    cuda_path=cuda,
                    source=source,
                )
        else:
            rows = observe(
                _load(a.target_config),
                draft,
                cases=cases,
                quiet=not a.verbose,
                cuda_path=cuda,
                source=os.path.basename(a.target_config),
            )
    _say(f"{len(rows)} observations in {time.monotonic() - t0:.1f} s")
    json.dump(rows, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
