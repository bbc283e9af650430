"""In the evaluation child (GPU), for CUDA candidates: prebuilt extensions and a launch witness.

* :func:`install_prebuilt_loader` replaces ``torch.utils.cpp_extension.load_inline`` before the
  candidate is imported: a call with the same arguments as one in the source text gets the library
  the evaluator already built (matched by :meth:`ExtensionSpec.key`); the child never compiles.
* :class:`ProfilerLaunchCounter` counts launches of the candidate's ``__global__`` kernels from
  torch.profiler's CUDA kernel events — the CUDA counterpart of the Triton launch wrapper, with the
  same ``install / take / intact`` interface the harness drives, plus :meth:`stop` before timing.
"""

from __future__ import annotations

import importlib.util
import types
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from forge_kernels.eval.cuda.source import ExtensionSpec, SpecError
from forge_kernels.eval.profiling import is_candidate_kernel

__all__ = ["ProfilerLaunchCounter", "install_prebuilt_loader"]


def install_prebuilt_loader(libraries: dict[str, str]) -> None:
    """Make ``load_inline`` load prebuilt libraries: ``libraries`` maps spec keys to ``.so`` paths."""
    from torch.utils import cpp_extension

    def load_inline(name: Any, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError("load_inline: pass the arguments after cuda_sources by keyword")
        try:
            spec = ExtensionSpec.from_arguments({"name": name, "cpp_sources": cpp_sources,
                                                 "cuda_sources": cuda_sources, **kwargs})
        except SpecError as err:
            raise ImportError(str(err)) from None
        path = libraries.get(spec.key())
        if path is None:
            raise ImportError(f"load_inline(name={name!r}) ran with arguments that differ from the ones in the "
                              "source text; the evaluator builds extensions before running the code, so "
                              "load_inline's arguments must be literals or module-level constants")
        module_spec = importlib.util.spec_from_file_location(spec.name, path)
        assert module_spec is not None and module_spec.loader is not None
        module: types.ModuleType = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module

    cpp_extension.load_inline = load_inline


class ProfilerLaunchCounter:
    """Counts device launches of the candidate's kernels between :meth:`take` calls.

    A profiler session runs from one ``take`` to the next; each ``take`` ends it, counts the CUDA
    kernel events whose names are the candidate's ``__global__`` functions and starts a new one.
    ``depth`` stays 0: torch ops seen by the aten audit are never inside a candidate launch (C++
    code calling torch does so between its own kernels, on the host).
    """

    def __init__(self, kernel_names: list[str]) -> None:
        self.kernel_names = list(kernel_names)
        self.depth = 0
        self.streams: set[int] = set()  # the profiler's stream ids are not CUDA stream handles: unused
        self._profile_cls = profile
        self._session: Any = None

    def install(self) -> None:
        self._start()

    def _start(self) -> None:
        self._session = profile(activities=[ProfilerActivity.CUDA])
        self._session.start()

    def _finish(self) -> int:
        if self._session is None:
            return 0
        torch.cuda.synchronize()
        self._session.stop()
        events = self._session.events() or []
        self._session = None
        return sum(1 for e in events if getattr(e, "device_type", None) == DeviceType.CUDA
                   and is_candidate_kernel(e.name, self.kernel_names))

    def take(self) -> int:
        """Candidate kernel launches since the last call."""
        n = self._finish()
        self._start()
        return n

    def stop(self) -> None:
        """End profiling (before timing, and before the profiling-ratio pass opens its own session)."""
        self._finish()

    def intact(self) -> bool:
        """Whether the profiler the counter relies on is still torch's own."""
        return torch.profiler.profile is self._profile_cls
