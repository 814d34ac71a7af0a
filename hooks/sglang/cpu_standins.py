"""SGLang's real classes on a CPU-only machine: stand-ins for the GPU-only packages it imports.

SGLang imports GPU-only packages at module level (triton, sgl_kernel, flashinfer, ...).
``install_standins()`` puts a meta-path finder first on ``sys.meta_path`` that serves a stand-in
module for each of them: every attribute looked up returns the same stand-in class (callable,
subscriptable, usable as a base class or decorator), except ``triton.runtime.driver.active``, which
raises so SGLang decides there is no Triton device and falls back to CPU. Nothing of those packages
runs; a caller that needs a kernel's behaviour sets a real function on the stand-in module
(``cpu_emulation.install``). torchaudio / torchcodec are left alone.

Used by ``python -m eagle3_top.hooks.sglang.observe`` and by the sglang tests (``tests/sglang_cpu.py``,
inside child interpreters). Install it only in a process that is to run SGLang on CPU: the stand-ins
stay in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

STANDIN_ROOTS = (
    "triton",
    "sgl_kernel",
    "sglang_kernel",
    "flashinfer",
    "deep_gemm",
    "deep_ep",
    "flash_mla",
    "flash_attn",
    "tilelang",
    "cutlass",
    "quack",
    "humming",
    "nvshmem",
    "vllm",
    "xformers",
    "cuda",
    "torchvision",
)


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return cls

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # used as a decorator (``@triton.jit``, ``@triton.autotune(...)``): hand back the function
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], type):
            return args[0]
        return cls

    def __iter__(cls) -> Iterator[Any]:  # ``for x in standin`` -> empty
        return iter(())

    def __bool__(cls) -> bool:
        return False

    def __or__(cls, other: Any) -> Any:  # type annotations like ``standin | None``
        return cls

    __ror__ = __or__

    def __mro_entries__(cls, bases: tuple[Any, ...]) -> tuple[Any, ...]:
        return (object,)


class StandIn(metaclass=_StandInMeta):
    """What every attribute of a stand-in module resolves to."""


class _Driver:
    @property
    def active(self) -> Any:
        raise RuntimeError("no triton device (CPU stand-in)")

    def __getattr__(self, name: str) -> Any:
        return StandIn


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if self.__name__ == "triton.runtime" and name == "driver":
            return _DRIVER
        return StandIn


_DRIVER = _Driver()


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _StandInModule(spec.name)
        mod.__path__ = []  # a package: submodules come from this finder too
        mod.__version__ = "0.0.0"  # type: ignore[attr-defined]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == "triton.runtime":
            module.driver = _DRIVER  # type: ignore[attr-defined]
        elif module.__name__ == "triton":
            module.runtime = importlib.import_module("triton.runtime")  # type: ignore[attr-defined]


class StandInFinder(importlib.abc.MetaPathFinder):
    """Serves a stand-in module for every module under ``STANDIN_ROOTS``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] in STANDIN_ROOTS:
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


def is_standin_module(module: Any) -> bool:
    """Whether ``module`` is one this finder made (not the real package)."""
    return isinstance(module, _StandInModule)


def _settle_torch_without_triton() -> None:
    """Let torch decide, before the stand-ins exist, that there is no Triton.

    torch caches ``has_triton_package()`` and its inductor picks Triton fallbacks at import time;
    doing both first keeps ``@torch.compile`` decorators in SGLang's modules from wiring the
    stand-in ``triton`` into inductor.
    """
    import torch  # noqa: F401
    from torch.utils import _triton

    _triton.has_triton_package()
    _triton.has_triton()
    import torch._inductor.compile_fx  # noqa: F401


def install_standins() -> StandInFinder:
    """Put the stand-in finder first on sys.meta_path (idempotent)."""
    for f in sys.meta_path:
        if isinstance(f, StandInFinder):
            return f
    _settle_torch_without_triton()
    finder = StandInFinder()
    sys.meta_path.insert(0, finder)
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    return finder


def init_process_group(world_size: int = 1, rank: int = 0) -> None:
    """A gloo world of ``world_size`` CPU processes, one tensor-parallel group over all of them, with
    SGLang's parallel context published. Every rank calls it with the same ``MASTER_PORT``.

    The context is published first: ``reset_context()`` would wipe the WORLD group that
    ``init_distributed_environment`` writes into it.
    """
    import inspect

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:  # a port free now, not one derived from the pid that
        os.environ["MASTER_PORT"] = str(_free_port())  # another process may hold
    import torch.distributed as dist
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel

    if dist.is_initialized():
        return
    _publish_context(world_size, rank)
    init_distributed_environment(
        world_size=world_size,
        rank=rank,
        local_rank=rank,
        backend="gloo",
        distributed_init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
    )
    if "tensor_model_parallel_size" in inspect.signature(initialize_model_parallel).parameters:
        initialize_model_parallel(tensor_model_parallel_size=world_size, backend="gloo")  # 0.5.17
    else:  # 0.5.23 reads the widths from the published context
        initialize_model_parallel(backend="gloo")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _publish_context(tp_size: int = 1, rank: int = 0) -> None:
    from sglang.srt.server_args import ServerArgs

    try:
        from sglang.srt import runtime_context as rc
    except ImportError:  # older SGLang: no runtime context to publish
        return
    rc.reset_context()
    publish_server_args(ServerArgs(model_path="dummy", device="cpu", tp_size=tp_size), rank)


def publish_server_args(server_args: Any, rank: int = 0, dp_rank: int | None = None) -> None:
    """Make ``server_args`` the process's published config (the last publish wins), for world rank
    ``rank`` of data-parallel replica ``dp_rank``, as ``run_scheduler_process`` publishes it."""
    from sglang.srt import runtime_context as rc

    if hasattr(rc, "SpawnRanks"):  # 0.5.23; 0.5.17's publish takes no ranks
        rc.publish(server_args, role="test", ranks=rc.SpawnRanks(world_rank=rank, dp_rank=dp_rank))
    else:
        rc.publish(server_args, role="test")
