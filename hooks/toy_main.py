"""``eagle3-top toy``: run the built-in EAGLE-3 engine with the tracer attached, no UI.

Always a process of its own (``python -m eagle3_top.hooks.toy_main``; the ``eagle3-top toy`` command
execs it): nothing of the monitor or the analysis is loaded here.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from types import FrameType
from typing import Any

from eagle3_top.tracer.schema import SourceId
from eagle3_top.tracer.serving.publisher import EndpointError, Publisher
from eagle3_top.tracer.serving.tracer import Tracer
from eagle3_top.tracer.transport.curve_flags import add_server_arguments, server_from

from .toy.spec_args import add_toy_arguments, spec_args_from_ns
from .toy_tracing import attach_toy


def build_parser(prog: str = "eagle3-top toy") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Run the built-in EAGLE-3 engine and publish its trace."
    )
    p.add_argument("--publish", metavar="ENDPOINT", help="ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:5557")
    p.add_argument("--allow-remote", action="store_true", help="allow binding a non-loopback address")
    add_server_arguments(p)
    p.add_argument("--show-paths", action="store_true", help="print the bundled model directories and exit")
    p.add_argument("--max-steps-per-s", type=float, default=None, help="throttle verify steps (demo pacing)")
    p.add_argument(
        "--linger-on-error",
        type=float,
        default=10.0,
        metavar="S",
        help="after an engine failure, keep publishing hello/health this long (default 10)",
    )
    p.add_argument("--rank", type=int, default=0, help="engine rank reported in the source id")
    p.add_argument(
        "--aux-interval",
        type=float,
        default=0.5,
        metavar="S",
        help="seconds between aux fingerprints (default 0.5; SGLang's plugin: EAGLE3_TOP_AUX_INTERVAL)",
    )
    p.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="serve SGLang's /generate (input_ids) on 127.0.0.1:PORT and run only those requests "
        "(0 = any free port)",
    )
    p.add_argument(
        "--context-length",
        type=int,
        default=None,
        help="longest prompt + completion accepted over HTTP (default: the target's max_position_embeddings)",
    )
    p.add_argument(
        "--guard-manifest",
        metavar="M",
        help="judge the wiring against this training manifest before serving; stop (exit 78) on an error "
        "finding (or $EAGLE3_TOP_GUARD_MANIFEST; $EAGLE3_TOP_GUARD=warn: log and serve)",
    )
    add_toy_arguments(p)
    return p


def run_guard(ns: argparse.Namespace, engine: Any) -> int | None:
    """The wiring guard, when asked for: None to serve, else the exit status."""
    from . import guard as wiring_guard

    try:
        g = wiring_guard.from_env(manifest=ns.guard_manifest)
    except wiring_guard.GuardSettingError as exc:
        print(f"eagle3-top toy: {exc}", file=sys.stderr)
        return 2
    if g is None:
        return None
    from .toy_tracing import toy_hello

    def log(level: str, line: str) -> None:
        print(f"eagle3-top toy: {level}: {line}", file=sys.stderr, flush=True)

    try:
        wiring_guard.enforce(g, toy_hello(engine), log)
    except wiring_guard.WiringRefused:
        return wiring_guard.EXIT_REFUSED
    return None


def engine_from_args(ns: argparse.Namespace) -> Any:
    """The engine the flags ask for (imports torch)."""
    from .toy.engine import ToyEagle3Engine

    return ToyEagle3Engine(
        target_path=ns.model_path,
        draft_path=ns.speculative_draft_model_path,
        spec=spec_args_from_ns(ns),
        batch_size=ns.batch_size,
        max_new_tokens=ns.max_new_tokens,
        prompt_len=ns.prompt_len,
        num_prompts=getattr(ns, "num_prompts", None),
        seed=ns.seed,
        max_steps=getattr(ns, "max_steps", None),
    )


def show_paths() -> None:
    from .toy import paths

    print(
        json.dumps(
            {
                "target": paths.target_dir(),
                "draft": paths.draft_dir(),
                "draft_ids_not_read": paths.draft_ids_not_read_dir(),
                "draft_no_embed": paths.draft_no_embed_dir(),
                "draft_no_embed_ids_not_read": paths.draft_no_embed_ids_not_read_dir(),
            },
            indent=2,
        )
    )


NEEDS_TORCH = "the built-in engine needs torch: {} (pip install 'eagle3-top[torch]')"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("gen-data", "export"):
        try:
            if argv[0] == "export":
                from .toy.export import main as sub_main
            else:
                from .toy.gendata import main as sub_main
        except ImportError as exc:
            print(f"eagle3-top toy: {NEEDS_TORCH.format(exc)}", file=sys.stderr)
            return 2
        return sub_main(argv[1:])
    ns = build_parser().parse_args(argv)
    if ns.show_paths:
        show_paths()
        return 0
    from eagle3_top.tracer.transport.curve import KeyError_

    try:  # before the engine loads: a half CURVE configuration is refused, not served open
        curve = server_from(ns)
    except KeyError_ as exc:
        print(f"eagle3-top toy: {exc}", file=sys.stderr)
        return 2
    try:
        engine = engine_from_args(ns)
    except ImportError as exc:
        print(f"eagle3-top toy: {NEEDS_TORCH.format(exc)}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"eagle3-top toy: {exc}", file=sys.stderr)
        return 2
    except (TypeError, AttributeError, KeyError, RuntimeError, RecursionError) as exc:
        # A hostile or broken config.json or weights file: name the directories, not a traceback.
        why = str(exc).splitlines()[0][:300] if str(exc) else ""
        print(
            f"eagle3-top toy: cannot build the engine from {ns.model_path or 'the built-in target'} and "
            f"{ns.speculative_draft_model_path or 'the built-in draft'}: {type(exc).__name__}: {why}",
            file=sys.stderr,
        )
        return 2
    refused = run_guard(ns, engine)
    if refused is not None:  # before anything is bound or served
        return refused
    publisher = None
    if ns.publish:
        try:
            publisher = Publisher(
                ns.publish,
                SourceId.local(rank=ns.rank, engine="toy"),
                allow_remote=ns.allow_remote,
                curve=curve,
            )
        except (EndpointError, Exception) as exc:
            print(f"eagle3-top toy: cannot publish on {ns.publish}: {exc}", file=sys.stderr)
            return 2
        attach_toy(engine, Tracer(publisher, aux_interval_s=ns.aux_interval))
        print(f"eagle3-top toy: publishing on {publisher.bound_endpoint}", file=sys.stderr, flush=True)

    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    period = 1.0 / ns.max_steps_per_s if ns.max_steps_per_s else 0.0
    next_t = time.perf_counter()

    def on_step(_engine: Any, _result: Any) -> None:
        nonlocal next_t
        if stop:
            raise KeyboardInterrupt
        if period:
            next_t += period
            delay = next_t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.perf_counter()

    if ns.context_length is not None:
        engine.context_length = ns.context_length
    front = None
    if ns.http is not None:
        from .toy.http_front import ToyHTTPFront

        try:
            front = ToyHTTPFront(engine, ns.http).start()
        except (OSError, ValueError) as exc:
            print(f"eagle3-top toy: cannot serve HTTP on 127.0.0.1:{ns.http}: {exc}", file=sys.stderr)
            if publisher is not None:
                publisher.close()
            return 2
        print(f"eagle3-top toy: serving /generate on {front.url}", file=sys.stderr, flush=True)

    try:
        if front is not None:
            while not stop:  # only HTTP requests: batch what is queued, run it, repeat
                front.serve_once(engine, 0.1, on_step=on_step)
            raise KeyboardInterrupt
        summary = engine.run(max_steps=ns.max_steps, on_step=on_step)
    except KeyboardInterrupt:
        summary = {"mean_accept_length": engine.mean_accept_length(), **engine.stats}
    except Exception as exc:
        # The engine itself failed (a wiring error that breaks the draft's fc, say). Like a server
        # that crashes on its first forward: say so in one line, and keep the hello and a health
        # event carrying the error on the wire for a moment, so a monitor can show why.
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        print(f"eagle3-top toy: engine failed: {why}", file=sys.stderr)
        if publisher is not None:
            publisher.engine_failed(why)
            deadline = time.monotonic() + ns.linger_on_error
            while time.monotonic() < deadline and not stop:
                time.sleep(0.1)
        return 1
    finally:
        if front is not None:
            front.close()
        if publisher is not None:
            publisher.close()
    if not engine.speculates:
        print(
            f"eagle3-top toy: {summary.get('verify_steps')} decode steps without speculation", file=sys.stderr
        )
        return 0
    print(
        "eagle3-top toy: {verify_steps} verify steps, mean accept length {mal:.3f}".format(
            verify_steps=summary.get("verify_steps"), mal=summary.get("mean_accept_length", float("nan"))
        ),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
