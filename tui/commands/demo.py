"""``eagle3-top demo``: two built-in engines, one wired as trained and one with the motivating bug;
``--fleet N``: N of them on consecutive ports, every third one mis-wired, the monitor on the range.

Start-up (the training manifest of the bundled draft, the engines, their first steps) happens before
the monitor opens and says what it is doing on stderr; whatever failed while the monitor was open
is printed after it closes, and the exit status is non-zero.

Every child (the engines, the manifest build) runs from an argv list, never through a shell, in a
process group of its own, so that stopping it stops whatever it started too, and so that a Ctrl-C
typed before the monitor opens reaches only this process, which then stops them all. They are
stopped (SIGTERM to the group, SIGKILL after a grace) on every way out that this process gets to
see: the monitor closed, an exception, SIGTERM, SIGINT or SIGHUP. The temporary directory goes with
them, except that the logs in it are kept, and their paths printed, when the demo failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from .args import endpoint_list
from .toy import engine_argv

if TYPE_CHECKING:
    from eagle3_top.tracer.analysis.manifest import Manifest

PROG = "eagle3-top demo"

ENGINES = (
    ("healthy", "draft"),
    ("ids-not-read", "draft_ids_not_read"),
)

# A fleet numbered as the SGLang plugin numbers ranks: consecutive ports from the default one.
FLEET_FIRST_PORT = 5557
MAX_FLEET = 32  # an engine holds ~280 MB; 8 take 0.9 of one core at FLEET_RATE (docs/performance.md)
DEMO_RATE, FLEET_RATE = 40.0, 10.0

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 3.0
START_TIMEOUT_S = 600.0
NOTE_EVERY_S = 15.0
LOG_TAIL_LINES = 12


class DemoError(Exception):
    """Something the demo needs failed; the message is the one line the user gets."""

    def __init__(self, message: str, log: str | None = None) -> None:
        super().__init__(message)
        self.log = log


class Interrupted(BaseException):
    """A stop signal arrived. A BaseException, like KeyboardInterrupt, so that no ``except Exception``
    on the way up swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: str
    engine: bool
    stopped: bool = False  # by us: its status then says how it took the stop, not that it crashed
    reported: bool = False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_run(n: int, first: int = FLEET_FIRST_PORT) -> int:
    """The first of ``n`` consecutive ports free on loopback, ``first`` if it can be."""
    port = first
    while port + n - 1 <= 65535:
        taken = [p for p in range(port, port + n) if not port_is_free(p)]
        if not taken:
            return port
        port = taken[-1] + 1
    raise DemoError(f"no {n} consecutive free ports on 127.0.0.1 from {first}")


def fleet_lineup(n: int) -> list[tuple[str, str]]:
    """(name, bundled draft) per engine: every third one reads the draft's ids from where SGLang
    does not look, the others are wired as trained."""
    return [
        (f"ids-not-read-{i}", "draft_ids_not_read") if i % 3 == 2 else (f"healthy-{i}", "draft")
        for i in range(n)
    ]


def describe_status(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


# Called with the demo, the endpoints and the manifest once the engines step; returns when the user
# is done. The real one runs the monitor; the tests pass their own.
Show = Callable[["Demo", list[str], "Manifest | None"], None]


class Demo:
    """The children of one demo, the temporary directory they write in, and their supervision.

    ``open`` before ``start``, and ``close`` always (``run`` does all three); ``close`` says what
    went wrong, for printing once the terminal is ours again.
    """

    def __init__(
        self,
        *,
        rate: float = DEMO_RATE,
        fleet: int | None = None,
        first_port: int = FLEET_FIRST_PORT,
        build_manifest: bool = True,
        engine_args: Sequence[str] = (),
        start_timeout_s: float = START_TIMEOUT_S,
        grace_s: float = GRACE_S,
        tmp_root: str | None = None,
        paths: dict[str, str] | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.rate = rate
        self.fleet = fleet
        self.first_port = first_port
        self.title = "eagle3-top demo — healthy vs ids-not-read"
        self.build_manifest = build_manifest
        self.engine_args = list(engine_args)
        self.start_timeout_s = start_timeout_s
        self.grace_s = grace_s
        self.tmp_root = tmp_root
        self.paths = paths
        self.err = err if err is not None else sys.stderr
        self.work_dir: str | None = None
        self.children: list[Child] = []
        self.signalled: int | None = None
        # While the monitor runs, a signal asks it to close (so the terminal is restored) instead of
        # raising inside its event loop; returns False when it cannot.
        self.soft_stop: Callable[[], bool] | None = None
        self._closing = False
        self._raised = False
        self._spawning = False
        self._old_handlers: dict[int, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        for signum in STOP_SIGNALS:
            self._old_handlers[signum] = signal.signal(signum, self._on_signal)
        self.work_dir = tempfile.mkdtemp(prefix="eagle3-top-demo-", dir=self.tmp_root)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = self.signalled is None
        if first:
            self.signalled = signum
        if self._closing or self._raised:
            return  # already on the way out; a second signal must not cut the clean-up short
        if self._spawning:
            return  # spawn() raises once the child is on the list, or it would escape the clean-up
        if self.soft_stop is not None:
            # An exception raised here would land inside the monitor's event loop, wherever it is
            # (a lock held, a queue half updated: Textual then hangs in its shutdown). Ask it to
            # close; should it not, the next signal stops the children at once.
            if not first:
                self.kill_children_now()
                return
            if self.soft_stop():
                return
        self._raise_stop()

    def kill_children_now(self) -> None:
        """SIGKILL to every group, from a signal handler: nothing is reaped here, close() does."""
        for c in self.children:
            if c.proc.returncode is None:
                c.stopped = True
                self._signal_group(c, signal.SIGKILL)

    def _raise_stop(self) -> None:
        assert self.signalled is not None
        self._raised = True
        raise Interrupted(self.signalled)

    def say(self, text: str) -> None:
        print(f"{PROG}: {text}", file=self.err, flush=True)

    def engines(self) -> list[Child]:
        return [c for c in self.children if c.engine]

    # -- children --------------------------------------------------------------------------------

    def spawn(
        self, name: str, argv: list[str], log: str, *, engine: bool = False, stdout: str | None = None
    ) -> Child:
        """``argv`` in a session of its own, output to ``log`` (stdout to ``stdout`` if given)."""
        self._spawning = True
        try:
            with open(log, "ab") as err, open(stdout or os.devnull, "wb") as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out if stdout else err,
                    stderr=err if stdout else subprocess.STDOUT,
                    start_new_session=True,
                    # the demo's monitor subscribes in plain text on loopback: CURVE keys meant for
                    # a real fleet must not turn its engines into CURVE servers
                    env={k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_TOP_CURVE_")},
                )
            child = Child(name, proc, log, engine)
            self.children.append(child)
        finally:
            self._spawning = False
        if self.signalled is not None and not self._raised and not self._closing:
            self._raise_stop()
        return child

    @staticmethod
    def exited(c: Child) -> bool:
        """Without reaping it: until it is reaped its pid, and so its group id, cannot be reused,
        and a signal to the group cannot reach a stranger's."""
        if c.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, c.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def reap(self, c: Child) -> int:
        """Its group killed (whatever it started and left behind), then its status collected."""
        if c.proc.returncode is None:
            self._signal_group(c, signal.SIGKILL)
        return c.proc.wait()

    def wait_exit(self, c: Child, what: str) -> int:
        self.wait_for(what, lambda: self.exited(c), c.log)
        return self.reap(c)

    def check_engines(self) -> None:
        for c in self.engines():
            if c.proc.returncode is None and self.exited(c):
                c.reported = True
                code = self.reap(c)
                raise DemoError(f"engine {c.name} {describe_status(code)} during start-up", c.log)

    def wait_for(self, what: str, done: Callable[[], bool], log: str | None = None) -> None:
        """Until ``done()``, an engine dies, or the start-up timeout; says so now and then, since a
        loaded machine can take minutes and silence looks like a hang."""
        start = time.monotonic()
        next_note = start + NOTE_EVERY_S
        while not done():
            self.check_engines()
            now = time.monotonic()
            if now - start > self.start_timeout_s:
                raise DemoError(f"{what} took longer than {self.start_timeout_s:g} s (--start-timeout)", log)
            if now >= next_note:
                self.say(f"still {what} ({now - start:.0f} s)")
                next_note += NOTE_EVERY_S
            time.sleep(0.1)

    def bundled_paths(self) -> dict[str, str]:
        assert self.work_dir is not None
        log = os.path.join(self.work_dir, "paths.log")
        out = os.path.join(self.work_dir, "paths.json")
        child = self.spawn("the built-in engine", engine_argv(["--show-paths"]), log, stdout=out)
        code = self.wait_exit(child, "locating the built-in engine")
        if code != 0:
            raise DemoError(f"the built-in engine is unavailable ({describe_status(code)})", log)
        with open(out) as f:
            paths: dict[str, str] = json.load(f)
        return paths

    # -- start-up --------------------------------------------------------------------------------

    def start(self) -> tuple[list[str], Manifest | None]:
        """The engines stepping and, unless asked not to, the manifest of the bundled draft."""
        assert self.work_dir is not None, "open() first"
        paths = self.paths if self.paths is not None else self.bundled_paths()
        manifest_log = os.path.join(self.work_dir, "manifest.log")
        data = os.path.join(self.work_dir, "hidden_states")
        manifest_path = os.path.join(self.work_dir, "manifest.json")
        manifest = None
        if self.build_manifest:
            self.say(f"building the training manifest of the bundled draft (log: {manifest_log})")
            # before the engines, not beside them: their steps would starve it of the CPU
            gen_data = engine_argv(["gen-data", "--out", data, "--num-samples", "16"])
            self.finish_manifest_step(self.spawn("generating training data", gen_data, manifest_log))
            cli = [sys.executable, "-m", "eagle3_top.tui.cli"]
            build = [*cli, "manifest", "build", "--draft", paths["draft"], "--data", data,
                     "--target-config", paths["target"],
                     "--metrics", os.path.join(paths["draft"], "training_metrics.json"),
                     "--out", manifest_path]  # fmt: skip
            self.finish_manifest_step(self.spawn("eagle3-top manifest build", build, manifest_log))
            manifest = self.load_manifest(manifest_path, manifest_log)
            self.say(f"training manifest built: the draft was trained on layers {manifest.layer_ids}")
        if self.fleet is None:
            lineup, endpoints = list(ENGINES), [f"tcp://127.0.0.1:{free_port()}" for _ in ENGINES]
        else:
            lineup, endpoints = fleet_lineup(self.fleet), self.fleet_endpoints(self.fleet)
        for rank, ((name, draft_key), endpoint) in enumerate(zip(lineup, endpoints, strict=True)):
            log = os.path.join(self.work_dir, f"{name}.log")
            self.say(f"starting engine {name} on {endpoint} (log: {log})")
            argv = engine_argv(
                [
                    "--publish",
                    endpoint,
                    "--speculative-draft-model-path",
                    paths[draft_key],
                    "--max-steps-per-s",
                    str(self.rate),
                    *(["--rank", str(rank)] if self.fleet is not None else []),
                    *self.engine_args,
                ]
            )
            self.spawn(name, argv, log, engine=True)
        self.say("waiting for first steps")
        self.wait_for_steps(endpoints)
        return endpoints, manifest

    def fleet_endpoints(self, n: int) -> list[str]:
        """One range, expanded as the monitor expands one given on its command line."""
        first = free_port_run(n, self.first_port)
        fleet = f"tcp://127.0.0.1:{first}-{first + n - 1}"
        self.title = f"eagle3-top demo — a fleet of {n} on {fleet}"
        self.say(f"a fleet of {n} engines on {fleet}, every third one mis-wired")
        return endpoint_list([fleet])[0]

    def finish_manifest_step(self, step: Child) -> None:
        try:
            code = self.wait_exit(step, step.name)
        except DemoError as exc:
            raise DemoError(f"no training manifest: {exc}", exc.log) from None
        if code != 0:
            raise DemoError(f"no training manifest: {step.name} {describe_status(code)}", step.log)

    def load_manifest(self, path: str, log: str) -> Manifest:
        from eagle3_top.tracer.analysis.manifest import ManifestError, load_manifest

        try:
            return load_manifest(path)
        except ManifestError as exc:
            raise DemoError(f"the training manifest built is unreadable: {exc}", log) from None

    def wait_for_steps(self, endpoints: list[str]) -> None:
        """Until every engine has published a step: the monitor then opens on live engines, and one
        that cannot step is reported here, in the terminal, rather than behind the monitor."""
        from eagle3_top.tracer.reader.subscriber import Subscriber
        from eagle3_top.tracer.schema import STEP

        subs = {ep: Subscriber([ep]) for ep in endpoints}
        waiting = set(endpoints)

        def done() -> bool:
            for ep in list(waiting):
                if any(ev.kind == STEP for ev in subs[ep].poll(0)):
                    waiting.discard(ep)
            return not waiting

        try:
            self.wait_for("waiting for first steps", done)
        finally:
            for sub in subs.values():
                sub.close()

    # -- shutdown --------------------------------------------------------------------------------

    def stop_children(self) -> None:
        """SIGTERM to every group, SIGKILL to every group after the grace; all of them reaped."""
        unreaped = [c for c in self.children if c.proc.returncode is None]
        for c in unreaped:
            if not self.exited(c):
                c.stopped = True
                self._signal_group(c, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and not all(self.exited(c) for c in unreaped):
            time.sleep(0.05)
        # to the groups of leaders that exited too: something they started may be left
        for c in unreaped:
            self.reap(c)

    @staticmethod
    def _signal_group(c: Child, signum: int) -> None:
        try:
            os.killpg(c.proc.pid, signum)  # its own session: the group id is its pid
        except (ProcessLookupError, PermissionError):
            pass

    def engine_failures(self) -> list[DemoError]:
        """Engines that ended by themselves, or reported a failure when stopped (the built-in
        engine exits 0 on SIGTERM unless it had failed)."""
        out = []
        for c in self.engines():
            code = c.proc.returncode
            if code is None or code == 0 or c.reported:
                continue
            if c.stopped and code in (-signal.SIGTERM, -signal.SIGKILL):
                continue
            out.append(DemoError(f"engine {c.name} {describe_status(code)}", c.log))
        return out

    def close(self, failed: bool) -> tuple[list[DemoError], list[str]]:
        """Stop every child, restore the signal handlers, remove the temporary directory (keeping
        the logs if the demo or an engine failed). Returns the engines' failures and notes to print."""
        self._closing = True
        self.soft_stop = None
        try:
            self.stop_children()
            failures = self.engine_failures()
            notes = self._remove_work_dir(keep_logs=failed or bool(failures))
        finally:
            for signum, old in self._old_handlers.items():
                signal.signal(signum, old)
            self._old_handlers.clear()
        return failures, notes

    def _remove_work_dir(self, keep_logs: bool) -> list[str]:
        if self.work_dir is None:
            return []
        if not keep_logs:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            return []
        kept = []
        for entry in sorted(os.listdir(self.work_dir)):
            full = os.path.join(self.work_dir, entry)
            if entry.endswith(".log") and os.path.isfile(full) and os.path.getsize(full):
                kept.append(full)
            elif os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.unlink(full)
        if not kept:
            os.rmdir(self.work_dir)
            return []
        return ["logs kept: " + " ".join(kept)]


def report(err: TextIO, error: DemoError) -> None:
    print(f"{PROG}: {error}", file=err)
    tail = log_tail(error.log) if error.log else []
    if tail:
        print(f"  last lines of {error.log}:", file=err)
        for line in tail:
            print(f"    {line}", file=err)


def run(demo: Demo, show: Show) -> int:
    """The whole demo around ``show``: 0 when all went well, 1 when something failed, 128+N after
    signal N. Errors are printed once ``show`` has returned and every child is stopped."""
    errors: list[DemoError] = []
    failed = True  # until proven otherwise: an unexpected exception keeps the logs too
    try:
        demo.open()
        endpoints, manifest = demo.start()
        show(demo, endpoints, manifest)
        failed = False
    except DemoError as exc:
        errors.append(exc)
    except Interrupted:
        failed = False
    finally:
        failures, notes = demo.close(failed)
        errors.extend(failures)
        for error in errors:
            report(demo.err, error)
        for note in notes:
            print(f"{PROG}: {note}", file=demo.err)
        demo.err.flush()
    if demo.signalled is not None:
        return 128 + demo.signalled
    return 1 if errors else 0


def show_monitor(demo: Demo, endpoints: list[str], manifest: Manifest | None) -> None:
    from eagle3_top.tui.app import Eagle3TopApp

    app = Eagle3TopApp(endpoints, title=demo.title, manifest=manifest)

    def close_app() -> bool:
        # the handler runs on the thread of the monitor's event loop, between two of its callbacks
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        loop.call_soon_threadsafe(app.exit)
        return True

    demo.soft_stop = close_app
    try:
        app.run()
    finally:
        demo.soft_stop = None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help=f"verify steps per second per engine (default {DEMO_RATE:g}; with --fleet {FLEET_RATE:g})",
    )
    ap.add_argument(
        "--fleet",
        type=fleet_size,
        metavar="N",
        help=f"N engines (2 to {MAX_FLEET}) on consecutive ports from {FLEET_FIRST_PORT}, every third one "
        "mis-wired, and the monitor on that port range",
    )
    ap.add_argument(
        "--port",
        type=fleet_port,
        default=FLEET_FIRST_PORT,
        metavar="P",
        help=f"with --fleet: the first port to try (default {FLEET_FIRST_PORT}; the next free run of N from there)",
    )
    ap.add_argument("--no-manifest", action="store_true", help="skip building the training manifest")
    ap.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for every engine (repeat; --engine-arg=--batch-size=4)",
    )
    ap.add_argument(
        "--start-timeout",
        type=float,
        default=START_TIMEOUT_S,
        metavar="S",
        help=f"fail if a start-up step (manifest, first steps) takes longer (default {START_TIMEOUT_S:g})",
    )
    return ap


def fleet_size(text: str) -> int:
    n = int(text) if text.isdigit() else 0
    if not 2 <= n <= MAX_FLEET:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of engines from 2 to {MAX_FLEET}")
    return n


def fleet_port(text: str) -> int:
    port = int(text) if text.isdigit() else 0
    if not 1024 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port from 1024 to 65535")
    return port


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        # The demo ends in the live monitor: drawing into a pipe would hang a job and fill its log.
        print("eagle3-top demo: the monitor needs a terminal (stdin and stdout)", file=sys.stderr)
        return 2
    return run(
        Demo(
            rate=ns.rate or (DEMO_RATE if ns.fleet is None else FLEET_RATE),
            fleet=ns.fleet,
            first_port=ns.port,
            build_manifest=not ns.no_manifest,
            engine_args=ns.engine_arg,
            start_timeout_s=ns.start_timeout,
        ),
        show_monitor,
    )
