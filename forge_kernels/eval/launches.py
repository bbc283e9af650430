"""Dynamic witnesses installed in the evaluation child before candidate code is imported.

* :class:`LaunchCounter` wraps Triton's launch path (``JITFunction.run`` on a GPU,
  ``InterpretedFunction.run`` on the interpreter; the autotuner and heuristics end there too), so
  every real kernel launch is counted, with the stream it went to.
* :class:`AtenAudit` is a ``TorchDispatchMode`` that records the aten ops the candidate's forward
  dispatches outside Triton launches: torch doing the work, and casts to lower precision.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["LaunchCounter", "AtenAudit", "ALLOWED_ATEN_OPS"]

# Allocation, views, layout and copies: what a Triton wrapper legitimately does around a launch.
ALLOWED_ATEN_OPS = frozenset(
    """
    empty empty_like empty_strided empty_permuted zeros zeros_like ones ones_like full full_like new_empty
    new_empty_strided new_zeros new_ones new_full arange scalar_tensor lift_fresh lift_fresh_copy
    view _unsafe_view reshape _reshape_alias as_strided as_strided_ permute transpose t expand expand_as
    squeeze unsqueeze flatten unflatten select slice narrow split split_with_sizes chunk unbind view_as
    detach detach_ alias clone contiguous copy_ _to_copy to zero_ fill_ cat stack _local_scalar_dense
    is_nonzero item resize_ set_ record_stream _pin_memory pin_memory randn rand normal_ uniform_
    sym_size sym_stride sym_numel sym_storage_offset
    """.split()
)
_LOW_PRECISION = (torch.float16, torch.bfloat16)


class LaunchCounter:
    """Counts Triton kernel launches; ``active`` is True while a launch (and its internals) runs."""

    def __init__(self) -> None:
        self.count = 0
        self.depth = 0
        self.streams: set[int] = set()
        self.installed: dict[type, Any] = {}
        self.wrappers: dict[type, Any] = {}

    def install(self) -> None:
        classes: list[type] = []
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover - interpreter always ships with triton 3
            pass
        for cls in classes:
            original = cls.run
            self.installed[cls] = original
            self.wrappers[cls] = self._wrap(original)
            cls.run = self.wrappers[cls]

    def _wrap(self, original: Any) -> Any:
        counter = self
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        current_stream = torch.cuda.current_stream

        def run(fn_self: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("warmup", False):
                counter.count += 1
                if cuda:
                    counter.streams.add(current_stream().cuda_stream)
            counter.depth += 1
            try:
                return original(fn_self, *args, **kwargs)
            finally:
                counter.depth -= 1

        return run

    def intact(self) -> bool:
        """Whether the wrappers are still the ones installed (candidate code may not replace them)."""
        return all(cls.run is self.wrappers[cls] for cls in self.wrappers)

    def take(self) -> int:
        """Launches since the last call."""
        n, self.count = self.count, 0
        return n


class AtenAudit(TorchDispatchMode):
    """Records aten ops dispatched outside Triton launches (see ``ALLOWED_ATEN_OPS``)."""

    def __init__(self, launches: LaunchCounter, task_dtypes: set[torch.dtype]) -> None:
        super().__init__()
        self.launches = launches
        self.task_dtypes = task_dtypes
        self.compute_ops: dict[str, int] = {}
        self.downcasts: list[str] = []

    _HOST_EXITS = ("numpy", "tolist", "__array__", "__dlpack__")

    def __enter__(self) -> "AtenAudit":
        """Also count the ways out to host compute that dispatch no aten op (``Tensor.numpy``...)."""
        self._saved = {name: getattr(torch.Tensor, name) for name in self._HOST_EXITS}
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, self._host_exit(name, original))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)

    def _host_exit(self, name: str, original: Any) -> Any:
        audit = self

        def counted(*args: Any, **kwargs: Any) -> Any:
            if audit.launches.depth == 0:
                key = f"host:Tensor.{name}"
                audit.compute_ops[key] = audit.compute_ops.get(key, 0) + 1
            return original(*args, **kwargs)

        return counted

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.launches.depth == 0:
            base = func.overloadpacket.__name__
            if base not in ALLOWED_ATEN_OPS and base.rstrip("_") not in ALLOWED_ATEN_OPS:
                self.compute_ops[base] = self.compute_ops.get(base, 0) + 1
            if base in ("_to_copy", "to", "copy_"):
                self._check_downcast(base, args, kwargs)
        return func(*args, **kwargs)

    def _check_downcast(self, base: str, args: tuple, kwargs: dict) -> None:
        if not args or not isinstance(args[0], torch.Tensor):
            return
        if base == "copy_":
            if len(args) > 1 and isinstance(args[1], torch.Tensor):
                src, dst = args[1].dtype, args[0].dtype
            else:
                return
        else:
            src, dst = args[0].dtype, kwargs.get("dtype", args[0].dtype)
        if src in self.task_dtypes and src not in _LOW_PRECISION and dst in _LOW_PRECISION:
            self.downcasts.append(f"{base}: {src} -> {dst}")
