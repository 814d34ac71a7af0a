"""``eagle3-top probe``: replay training samples through a server and compare the aux rows it feeds
its draft with the training rows, slot by slot. Exit codes as ``check``: 0 clean, 1 an error
finding, 2 usage, input or connection problems (one line on stderr)."""

from __future__ import annotations

import argparse
import sys

from eagle3_top.tracer.transport.curve_flags import add_client_arguments as add_curve_arguments
from eagle3_top.tracer.transport.curve_flags import client_from as curve_from

from .args import endpoint_list, positive_float, positive_int
from .report import EXIT_FINDINGS, EXIT_OK, fail, parse, print_findings, print_json, safe, stderr_progress


def _fail(msg: str) -> int:
    return fail("eagle3-top probe", msg)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eagle3-top probe",
        description="Send training samples to the server with probe rids (SGLang's /generate; vLLM's "
        "/v1/completions, chosen by the engine the stream's hello names), read their aux rows from the "
        "stream and compare them with training, slot by slot.",
    )
    p.add_argument(
        "--server",
        required=True,
        metavar="URL",
        help="the server's HTTP address, e.g. http://127.0.0.1:30000 (SGLang) or :8000 (vLLM)",
    )
    p.add_argument(
        "--endpoint", required=True, action="append", metavar="ENDPOINT",
        help="the server's eagle3-top stream (repeat for several ranks)",
    )  # fmt: skip
    p.add_argument("--manifest", metavar="M", help="training manifest (its probe samples, layers, metrics)")
    p.add_argument(
        "--data", metavar="DIR", help="training hidden-state files to replay instead of the manifest's probes"
    )
    p.add_argument(
        "--samples", type=positive_int, default=4, metavar="K", help="samples to replay (default 4)"
    )
    p.add_argument(
        "--max-new-tokens", type=positive_int, default=32, help="tokens to generate per sample (default 32)"
    )
    p.add_argument("--json", action="store_true", help="print findings as a JSON list")
    p.add_argument(
        "--timeout", type=positive_float, default=60.0, help="seconds for the whole exchange (default 60)"
    )
    add_curve_arguments(p)
    return p


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    if not ns.manifest and not ns.data:
        return _fail("give --manifest M (its probe samples) or --data DIR (training files)")
    if not ns.server.startswith(("http://", "https://")):
        return _fail(f"--server {ns.server!r}: expected an http:// or https:// URL")
    endpoints, bad = endpoint_list(ns.endpoint)
    for msg in bad:
        print(f"eagle3-top probe: {msg} (skipped)", file=sys.stderr)
    if not endpoints:
        return _fail("no valid --endpoint")

    from eagle3_top.tracer.analysis.findings import has_errors
    from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest
    from eagle3_top.tracer.analysis.probe_run import (
        ProbeError,
        run_probe,
        samples_from_data,
        samples_from_manifest,
    )
    from eagle3_top.tracer.transport.curve import KeyError_

    try:
        curve = curve_from(ns)
    except KeyError_ as exc:
        return _fail(str(exc))
    try:
        manifest = load_manifest(ns.manifest) if ns.manifest else None
        if ns.data:
            try:
                samples = samples_from_data(ns.data, ns.samples)
            except ImportError as exc:
                return _fail(f"reading training files needs torch: {exc}")
        else:
            assert manifest is not None
            samples = samples_from_manifest(manifest)
        with stderr_progress("probe") as progress:
            result = run_probe(
                ns.server, endpoints, samples, manifest=manifest, count=ns.samples,
                timeout=ns.timeout, max_new_tokens=ns.max_new_tokens, curve=curve, progress=progress,
            )  # fmt: skip
    except (ManifestError, ProbeError) as exc:
        return _fail(str(exc))
    except Exception as exc:  # a bad endpoint string, say
        return _fail(f"probe failed: {type(exc).__name__}: {exc}")

    if ns.json:
        print_json(result.findings)
    else:
        print(f"verdict: {result.verdict}")
        if result.matrix is not None:
            print(matrix_text(result.matrix))
        print(f"mapping: {result.mapping_text}")
        pa = "n/a" if result.probe_accept is None else f"{result.probe_accept:.2f}"
        print(f"accept length on training samples: {pa} ({result.probe_accept_source})")
        if result.live_accept is None:
            print("live traffic: no live traffic seen during the probe")
        else:
            print(
                f"live traffic: accept length {result.live_accept:.2f} over {result.live_request_steps} request-steps"
            )
        print_findings(f for f in result.findings if f.code != "PROBE_OK")
    for note in result.notes:
        print(f"note: {safe(note)}", file=sys.stderr)
    return EXIT_FINDINGS if has_errors(result.findings) else EXIT_OK


def matrix_text(matrix: object) -> str:
    import numpy as np

    m = np.asarray(matrix)
    head = "served\\trained " + " ".join(f"{j:>6d}" for j in range(m.shape[1]))
    rows = [f"{i:>14d} " + " ".join(f"{v:6.3f}" for v in m[i]) for i in range(m.shape[0])]
    return "\n".join([head, *rows])
