"""Check that a task's reference solution matches its reference ``Model``.

This is a trusted, in-process check for solutions we wrote ourselves (the built-in set); candidate
code from a model goes through the isolated evaluator in :mod:`forge_kernels.eval` instead. It
follows KernelBench's protocol: the same seed before building ``Model`` and ``ModelNew`` (so
parameters created in the same order are equal), a fresh seed for the inputs, the reference run
first on its own copy of the inputs.

On CPU the kernels run on Triton's interpreter, which must be switched on before the solution is
imported: run ``python -m forge_kernels.tasks.selfcheck`` (which does it), or set
``TRITON_INTERPRET=1`` in the environment before calling :func:`check_solution`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel

from forge_kernels.tasks.modules import import_source
from forge_kernels.tasks.source_check import apply_shape_overrides
from forge_kernels.tasks.task import DeviceClass, Task

__all__ = ["SelfCheckResult", "check_solution", "default_tolerance", "main"]


class SelfCheckResult(BaseModel):
    """Outcome of one reference-solution check."""

    name: str
    device: str
    alternate: bool
    passed: bool
    max_abs_diff: float | None = None
    atol: float
    rtol: float
    seconds: float
    error: str | None = None


def default_tolerance(task: Task) -> float:
    """atol = rtol for fp32 outputs: 1e-4, or 1e-3 where long ``tl.dot`` reductions accumulate.

    Built-in solutions use ``input_precision="tf32x3"`` on GPUs; plain TF32 against an fp32
    reference misses 1e-2 on a 4096-deep matmul of unit-variance inputs. The same bounds hold on
    the interpreter and on an H100 (measured).
    """
    return max(1e-3 if "matmul" in task.tags else 1e-4, task.tolerance.get("float32", 0.0))


def _to_device(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _clone(values: list[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _compare(expected: Any, got: Any, atol: float, rtol: float) -> tuple[float, str | None]:
    """Max |difference| over (possibly nested) outputs, and a mismatch description or None."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return float("inf"), f"expected a sequence of {len(expected)} outputs, got {type(got).__name__}"
        worst = 0.0
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            diff, problem = _compare(e, g, atol, rtol)
            worst = max(worst, diff)
            if problem:
                return worst, f"output {i}: {problem}"
        return worst, None
    if not isinstance(got, torch.Tensor):
        return float("inf"), f"expected a tensor, got {type(got).__name__}"
    if got.shape != expected.shape:
        return float("inf"), f"shape {tuple(got.shape)} != expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return float("inf"), f"dtype {got.dtype} != expected {expected.dtype}"
    diff = (got.double() - expected.double()).abs()
    worst = float(diff.max()) if diff.numel() else 0.0
    if not torch.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=False):
        return worst, f"values differ: max |diff| {worst:.3g} (atol={atol}, rtol={rtol})"
    return worst, None


def check_solution(task: Task, device: str = "cpu", alternate: bool = False, seed: int = 42,
                   atol: float | None = None, rtol: float | None = None) -> SelfCheckResult:
    """Run ``task.solution`` and ``task.source`` on the device's shape set and compare outputs."""
    if task.solution is None:
        raise ValueError(f"task {task.name!r} has no reference solution to check")
    dev = torch.device(device)
    device_class: DeviceClass = "gpu" if dev.type == "cuda" else "cpu"
    if device_class == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("checking on CPU needs Triton's interpreter: set TRITON_INTERPRET=1 before "
                           "calling check_solution (or use `python -m forge_kernels.tasks.selfcheck`)")
    tol = default_tolerance(task)
    atol = tol if atol is None else atol
    rtol = tol if rtol is None else rtol
    start = time.perf_counter()
    max_diff: float | None = None
    error: str | None = None
    try:
        source = apply_shape_overrides(task.source, task.shape_overrides(device_class, alternate), task.name)
        with tempfile.TemporaryDirectory(prefix="forge_selfcheck_") as tmp:
            reference = import_source(source, f"{task.name}_ref", Path(tmp))
            solution = import_source(task.solution, f"{task.name}_sol", Path(tmp))
            torch.manual_seed(seed)
            init_inputs = list(reference.get_init_inputs())
            torch.manual_seed(seed)
            model = reference.Model(*init_inputs).to(dev).eval()
            torch.manual_seed(seed)
            model_new = solution.ModelNew(*init_inputs).to(dev).eval()
            torch.manual_seed(seed + 1)
            inputs = [_to_device(x, dev) for x in reference.get_inputs()]
            with torch.no_grad():
                expected = model(*_clone(inputs))
                got = model_new(*_clone(inputs))
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            max_diff, error = _compare(expected, got, atol, rtol)
    except Exception:  # noqa: BLE001 - a failing solution is a result to report, not a crash
        error = traceback.format_exc(limit=-6)
    return SelfCheckResult(
        name=task.name, device=str(dev), alternate=alternate, passed=error is None,
        max_abs_diff=max_diff, atol=atol, rtol=rtol, seconds=time.perf_counter() - start, error=error,
    )


def main(argv: list[str] | None = None) -> int:
    """CLI: check built-in solutions; prints one JSON line per check, exits 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda[:N]")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--names", nargs="+", default=None, help="e.g. level1/relu")
    parser.add_argument("--primary-only", action="store_true", help="skip the alternate shape set")
    args = parser.parse_args(argv)
    if torch.device(args.device).type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before any solution module is imported
    from forge_kernels.tasks.loaders import load_builtin_tasks

    failed = 0
    for task in load_builtin_tasks(args.levels, args.names):
        for alternate in (False,) if args.primary_only else (False, True):
            result = check_solution(task, args.device, alternate)
            failed += not result.passed
            print(json.dumps(result.model_dump()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
