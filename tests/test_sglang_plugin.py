"""SGLang's real plugin loader finding our entry point: nothing without ``EAGLE3_TOP_PUBLISH``, the
hooks with it, and one reason (and nothing registered) on an untested release."""

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

# -- child side (runs with the stand-ins installed) --------------------------------------------------


def child_plugin_loader() -> dict[str, Any]:
    """SGLang's real ``load_plugins()`` finding our entry point, without and with the env var."""
    from importlib.metadata import entry_points

    import sglang
    import sglang.srt.plugins as plugins
    from eagle3_top.hooks.sglang import plugin
    from sglang.srt.plugins.hook_registry import HookRegistry

    eps = [f"{ep.name}={ep.value}" for ep in entry_points(group="sglang.srt.plugins")]
    out: dict[str, Any] = {"entry_points": eps}

    def state() -> dict[str, Any]:
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

        return {
            "targets": sorted(
                t
                for t in HookRegistry._hooks
                if t in (plugin.VERIFY_TARGET, plugin.SCHEDULER_INIT_TARGET, plugin.RESULT_TARGET)
            ),
            "verify_wrapped": hasattr(EAGLEWorkerV2.verify, "__wrapped__"),
            "init_wrapped": hasattr(Scheduler.__init__, "__wrapped__"),
            "publisher": plugin._state["publisher"] is not None,
            "off": plugin._state["off"].reason,
        }

    os.environ.pop("EAGLE3_TOP_PUBLISH", None)
    plugins.load_plugins()
    out["without_env"] = state()

    os.environ["EAGLE3_TOP_PUBLISH"] = "tcp://127.0.0.1:1"  # never bound: no scheduler here
    plugins._plugins_loaded = False
    plugins.load_plugins()
    out["with_env"] = state()

    # an untested version: one log line, stays off, registers nothing
    plugin._reset_for_tests()
    HookRegistry.reset() if hasattr(HookRegistry, "reset") else None
    real = sglang.__version__
    sglang.__version__ = "0.6.1"
    plugin.register()
    sglang.__version__ = real
    out["bad_version"] = {
        "off": plugin._state["off"].reason,
        "registered": plugin._state["registered"],
        "targets": sorted(HookRegistry._hooks),
    }
    out["version"] = real
    return out


# -- pytest side ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loader() -> dict[str, Any]:
    return sglang_cpu.run_child("test_sglang_plugin", "child_plugin_loader")


def test_plugin_loader_runs_our_entry_point(loader: dict[str, Any]) -> None:
    if not any(e.startswith("eagle3_top=") for e in loader["entry_points"]):
        pytest.skip("eagle3-top's entry point is not installed (pip install -e .)")
    assert "eagle3_top=eagle3_top.hooks.sglang.plugin:register" in loader["entry_points"]
    off = loader["without_env"]
    assert off["targets"] == [] and not off["verify_wrapped"] and not off["init_wrapped"]
    on = loader["with_env"]
    assert on["verify_wrapped"] and on["init_wrapped"] and len(on["targets"]) == 3
    assert not on["publisher"], "no socket may be bound outside a scheduler process"
    assert on["off"] is None


def test_untested_version_stays_off_with_one_reason(loader: dict[str, Any]) -> None:
    bad = loader["bad_version"]
    assert not bad["registered"] and "0.6.1" in bad["off"]
    assert bad["targets"] == []
