"""The wiring guard inside SGLang, on its real classes (CPU): SGLang's own plugin loader installs our
``Scheduler.__init__`` hook; the scheduler's spec worker is a real ``EAGLEWorkerV2`` holding SGLang's
real target (capture list set by its own ``set_eagle3_layers_to_capture`` from ids read by its own
``resolve_spec_aux_hidden_state_config``) and draft. With a training manifest named in the
environment, a draft whose ids sit where SGLang does not read them stops the scheduler's start-up
with the findings and their fixes in SGLang's log; warn mode logs and starts; the right wiring starts.
``make test`` runs this file against SGLang 0.5.23 and 0.5.17."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("sglang (and torch) not installed: see .ci/requirements-sglang.txt", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_cpu  # noqa: E402

TRAINED = [0, 2, 3]


def _manifest(path: str, hidden: int) -> str:
    import json

    with open(path, "w") as f:
        json.dump(
            {
                "eagle3_top_manifest": 1,
                "aux": {"layer_ids": TRAINED, "concat_order": TRAINED, "slots": 3, "slot_width": hidden},
                "reference": {"fingerprint": {"rms": [1.0, 2.0, 3.0], "mean": [0.0, 0.0, 0.0]}},
            },
            f,
        )
    return path


def child_guard() -> dict[str, Any]:
    import logging
    import tempfile

    import sglang.srt.managers.scheduler as scheduler_module
    import sglang.srt.plugins as plugins
    from eagle3_top.hooks import guard
    from sglang_objects import HIDDEN, LAYER_CASES, build, eagle_worker, server_args, write_models

    sglang_cpu.init_process_group()
    root = tempfile.mkdtemp(prefix="e3t-guard-")
    manifest = _manifest(os.path.join(root, "m.json"), HIDDEN)
    workers = {}
    for name in ("nested", "top_level"):
        tdir, ddir = write_models(root, name, LAYER_CASES[name])
        sa = server_args(
            tdir, ddir, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
        )
        _, _, draft_runner, runner = build(sa, ddir)
        workers[name] = eagle_worker(sa, runner, draft_runner)

    # SGLang's own Scheduler.__init__ needs a GPU: a stand-in body that leaves the spec worker where
    # the real one does. SGLang's plugin loader then wraps it with our hook, as on a server.
    current: dict[str, Any] = {}

    def init_body(self: Any, *args: Any, **kwargs: Any) -> None:
        self.draft_worker = current["worker"]

    scheduler_module.Scheduler.__init__ = init_body  # type: ignore[method-assign]
    os.environ.pop("EAGLE3_TOP_PUBLISH", None)
    os.environ[guard.ENV_MANIFEST] = manifest
    plugins.load_plugins()

    lines: list[tuple[str, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.levelname, record.getMessage()))

    logging.getLogger("eagle3_top.hooks.sglang").addHandler(Keep())
    logging.getLogger("eagle3_top.hooks.sglang").setLevel(logging.INFO)
    out: dict[str, Any] = {"wrapped": scheduler_module.Scheduler.__init__ is not init_body}
    for mode in ("stop", "warn"):
        os.environ[guard.ENV_MODE] = mode
        for name, worker in workers.items():
            current["worker"] = worker
            lines.clear()
            sched = object.__new__(scheduler_module.Scheduler)
            try:
                scheduler_module.Scheduler.__init__(sched, None, None, 0, 0)
                raised = None
            except guard.WiringRefused as exc:
                raised = str(exc)
            out[f"{mode}/{name}"] = {
                "raised": raised,
                "log": list(lines),
                "started": hasattr(sched, "draft_worker"),
            }
    return out


@pytest.fixture(scope="module")
def guarded() -> dict[str, Any]:
    return sglang_cpu.run_child("test_sglang_guard", "child_guard")


def test_the_guard_is_installed_by_sglangs_plugin_loader(guarded: dict[str, Any]) -> None:
    assert guarded["wrapped"]


def test_ids_sglang_does_not_read_stop_the_scheduler_with_the_fix_in_its_log(guarded: dict[str, Any]) -> None:
    r = guarded["stop/top_level"]
    assert r["raised"] is not None and "LAYER_IDS_NOT_READ" in r["raised"]
    assert (
        "put eagle_config.eagle_aux_hidden_state_layer_ids = [0, 2, 3] in the draft's config.json"
        in r["raised"]
    )
    errors = [line for level, line in r["log"] if level == "ERROR"]
    assert any(line.startswith("eagle3-top guard: LAYER_IDS_NOT_READ: SGLang fell back") for line in errors)
    assert any(line.startswith("eagle3-top guard: LAYER_MAP_MISMATCH") for line in errors)
    assert any("not serving" in line for line in errors)


def test_warn_mode_logs_and_starts(guarded: dict[str, Any]) -> None:
    r = guarded["warn/top_level"]
    assert r["raised"] is None and r["started"]
    warnings = [line for level, line in r["log"] if level == "WARNING"]
    assert any("LAYER_IDS_NOT_READ" in line for line in warnings)
    assert any("serving anyway" in line for line in warnings)


def test_the_trained_wiring_starts(guarded: dict[str, Any]) -> None:
    for mode in ("stop", "warn"):
        r = guarded[f"{mode}/nested"]
        assert r["raised"] is None and r["started"], r
        assert any("the wiring matches the training manifest" in line for _, line in r["log"])
