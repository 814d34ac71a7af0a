"""``eagle3-top preflight``: what a server will do with a target and an EAGLE-3 draft, from their
config files and the engine's rules for a release, judged as ``check`` judges a live server."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from .report import EXIT_FINDINGS, EXIT_OK, fail, parse, print_findings, safe

if TYPE_CHECKING:
    from eagle3_top.tracer.analysis.findings import Finding
    from eagle3_top.tracer.analysis.manifest import Manifest
    from eagle3_top.tracer.analysis.preflight import Prediction
    from eagle3_top.tracer.engines.base import SpecArgs

PROG = "eagle3-top preflight"
SOURCE = "preflight"  # the findings' source: no server yet


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Predict, from the config files and the engine's rules, what a server will do with this "
        "target and draft: the layer ids it reads or misses, the layers it captures and in which order, "
        "the aux width against the draft's fc, the flags it rewrites and the release's known defects. "
        "Exit 0 pass, 1 an error finding, 2 usage or unreadable files (as check).",
    )
    p.add_argument("--model-path", "--model", required=True, metavar="DIR", help="the target model directory")
    p.add_argument(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        metavar="DIR",
        help="the EAGLE-3 draft directory (vLLM: or the model of --speculative-config)",
    )
    p.add_argument(
        "--speculative-config",
        metavar="JSON",
        help='vLLM\'s flag as given to the server, e.g. \'{"method": "eagle3", "model": D, '
        '"num_speculative_tokens": 3}\': the draft, the method and the steps (implies --engine vllm)',
    )
    p.add_argument("--speculative-algorithm", default="EAGLE3", choices=("EAGLE3", "EAGLE"))
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--engine", default=None, help="the serving engine: sglang (default) or vllm")
    p.add_argument(
        "--engine-version",
        "--sglang-version",
        "--vllm-version",
        dest="engine_version",
        metavar="V",
        help="the release to predict for (default: the installed engine's, by its package metadata)",
    )
    p.add_argument(
        "--from-table",
        action="store_true",
        help="predict from the engine's rules and its table of observed releases only, even where the "
        "release is installed here (by default its own classes are run on the CPU: seconds)",
    )
    p.add_argument("--manifest", metavar="M", help="the training manifest to compare with")
    p.add_argument("--json", action="store_true", help="the prediction and findings as one JSON object")
    return p


def _ids(v: list[int] | None) -> str:
    return "none" if v is None else "[" + ", ".join(map(str, v)) + "]"


def prediction_lines(p: Prediction, manifest: Manifest | None) -> list[str]:
    h = p.hello
    aux, m = h.aux, h.model
    lines = [
        f"{p.engine.title} {p.version or '(newest rules)'} ({p.version_source}); target {m.arch} "
        f"({m.num_layers} layers, hidden {m.hidden_size}); draft {m.draft_path}"
    ]
    if aux is not None:
        if aux.ids_read is not None:
            read = f"ids read: {_ids(aux.ids_read)} ({p.engine.ids_key})"
        elif aux.declared_ids is not None:
            read = f"ids read: none, {_ids(aux.declared_ids)} sit at the config's {aux.ids_location.replace('_', ' ')}: the target uses its default layers"
        else:
            read = "ids read: none declared: the target uses its default layers"
        lines.append(read)
        if aux.use_aux_hidden_state is False:
            lines.append("captured: nothing (eagle_config.use_aux_hidden_state is false)")
        else:
            lines.append(
                f"captured, in this order: native {_ids(aux.capture_native)} = canonical {_ids(aux.capture_canonical)}"
                + (f" ({aux.capture_note})" if aux.capture_note else "")
            )
        lines.append(
            f"aux width {aux.width} ({aux.slots} slots); the draft's fc expects {aux.expected_width} ({p.fc_source})"
        )
    req, eff = h.requested, h.effective
    if eff is not None:
        flags = f"flags: steps {eff.num_steps}, topk {eff.topk}, draft tokens {eff.num_draft_tokens}"
        rewritten = "; ".join(f"{r.param} {r.old} → {r.new} ({r.reason})" for r in h.rewrites)
        lines.append(flags + (f"; rewritten: {rewritten}" if rewritten else "; none rewritten"))
    if req is not None and req.algorithm != (eff.algorithm if eff else None):
        lines.append(f"algorithm: {req.algorithm} → {eff.algorithm if eff else '?'}")
    if manifest is not None:
        lines.append(f"manifest: trained on {_ids(manifest.concat_order)} (canonical, concatenation order)")
    lines.extend(f"note: {n}" for n in p.notes)
    return lines


def _requested(ns: argparse.Namespace) -> tuple[str, SpecArgs, str]:
    """The draft directory, the flags in SGLang's vocabulary and the engine, from SGLang's flags or
    vLLM's ``--speculative-config``. Raises ``PreflightError`` (one line)."""
    from eagle3_top.tracer.analysis.preflight import PreflightError
    from eagle3_top.tracer.engines.base import SpecArgs

    spec = SpecArgs(
        ns.speculative_algorithm,
        ns.speculative_num_steps,
        ns.speculative_eagle_topk,
        ns.speculative_num_draft_tokens,
    )
    draft, engine = ns.speculative_draft_model_path, ns.engine
    if ns.speculative_config is not None:
        from eagle3_top.tracer.engines.vllm.flags import algorithm_of

        try:
            cfg = json.loads(ns.speculative_config)
        except ValueError as exc:
            raise PreflightError(f"--speculative-config is not JSON: {exc}") from None
        if not isinstance(cfg, dict):
            raise PreflightError("--speculative-config must be a JSON object, as vLLM takes it")
        k = cfg.get("num_speculative_tokens")
        if k is not None and type(k) is not int:
            raise PreflightError(f"--speculative-config: num_speculative_tokens {k!r} is not an integer")
        model = cfg.get("model")
        if draft is None and isinstance(model, str):
            draft = model
        spec = SpecArgs(algorithm_of(cfg.get("method") or "eagle3"), k, None, None)
        engine = engine or "vllm"
    if draft is None:
        raise PreflightError(
            "name the draft: --speculative-draft-model-path DIR (or vLLM's --speculative-config)"
        )
    return draft, spec, engine or "sglang"


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    from eagle3_top.tracer.analysis import preflight
    from eagle3_top.tracer.analysis.codes import fold
    from eagle3_top.tracer.analysis.diagnose import defect_finding, diagnose
    from eagle3_top.tracer.analysis.evidence import EvidenceBook
    from eagle3_top.tracer.analysis.findings import has_errors
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.analysis.preflight import PreflightError, predict
    from eagle3_top.tracer.schema import HELLO, Event

    try:
        draft, spec, engine = _requested(ns)
        manifest = load_manifest(ns.manifest) if ns.manifest else None
        p = predict(ns.model_path, draft, spec, ns.engine_version, engine)
    except (ManifestError, PreflightError) as exc:
        return fail(PROG, str(exc))
    ns.speculative_draft_model_path = draft
    # The release's own classes where they can run here; else the table, and a line saying so.
    why_not = "--from-table" if ns.from_table else preflight.observable(p.engine, p.version)
    observed = None
    if why_not is None:
        print(f"{PROG}: running {p.engine.title} {p.version}'s own classes for {p.hello.model.arch} on the CPU ...",
              file=sys.stderr, flush=True)  # fmt: skip
        got = preflight.observe(p.engine, ns.model_path, ns.speculative_draft_model_path)
        if isinstance(got, str):
            why_not = got
        else:
            observed = got
            p = preflight.with_observation(p, got)
    if observed is None:
        p = dataclasses.replace(
            p, notes=(*p.notes, f"from the rules and the table of observed releases ({why_not})")
        )
    book = EvidenceBook(manifest=manifest)
    book.ingest([Event(HELLO, SOURCE, 0, 0.0, p.hello.to_body())], 0.0)
    findings: list[Finding] = diagnose(book.sources[SOURCE], manifest)
    if observed is not None:  # the release's own classes were run on this pair: the table's gap is filled
        findings = [f for f in findings if f.code != "ENGINE_DEFECTS_UNKNOWN"]
    seen = observed is not None and preflight.observed_defect(p, observed)
    if seen and not any(
        f.code == "ENGINE_KNOWN_DEFECT" and f.evidence.get("symptom") == seen.symptom for f in findings
    ):
        findings = list(fold([*findings, defect_finding(seen, p.hello, manifest, SOURCE)]))
    code = EXIT_FINDINGS if has_errors(findings) else EXIT_OK
    if ns.json:
        print(
            json.dumps(
                {
                    "verdict": "fail" if code else "pass",
                    "exit_code": code,
                    "engine": p.engine.name,
                    "engine_version": p.version,
                    "version_source": p.version_source,
                    "fc_source": p.fc_source,
                    "notes": list(p.notes),
                    "observed": None
                    if observed is None
                    else {**observed.row, "outcome": observed.outcome.kind},
                    "hello": p.hello.to_body(),
                    "findings": [f.to_json() for f in findings],
                },
                indent=1,
            )
        )
        return code
    for line in prediction_lines(p, manifest):
        print(safe(line))
    if findings:
        print()
        print_findings(findings)
    print(f"\npreflight: {'FAIL' if code else 'pass'} ({len(findings)} finding(s))", file=sys.stdout)
    return code
