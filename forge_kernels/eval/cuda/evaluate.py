"""Evaluation of CUDA candidates (``EvalOptions.language == "cuda"``), called by the Evaluator.

1. Static checks (:mod:`.policy`): Python and C++ sources, the ``load_inline`` calls resolved.
2. Build every extension (:mod:`.build`) in the evaluator's process: cached per spec hash,
   bounded by ``compile_timeout_s``; compiler diagnostics become ``cuda_compile_error`` feedback.
3. On a CPU machine that is all: the result says the candidate compiled and that correctness and
   timing are unavailable (torch without CUDA cannot load the extension), with the static hack
   checks applied. On a GPU the candidate runs in a forked child like a Triton candidate, its
   ``load_inline`` calls served the prebuilt libraries, launches counted by the profiler.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from forge_kernels.eval.cuda.build import BuildResult, build_extension
from forge_kernels.eval.cuda.static_checks import analyze_cuda_source
from forge_kernels.eval.cuda.source import ExtensionSpec
from forge_kernels.eval.faults import FaultClass
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.eval.verdict import judge_static
from forge_kernels.tasks.task import Task

if TYPE_CHECKING:
    from forge_kernels.eval.evaluator import Evaluator

__all__ = ["evaluate_cuda", "CPU_CORRECTNESS_NOTE", "CPU_TIMING_NOTE", "CPU_DEVICE"]

CPU_DEVICE = "cpu (nvcc build only)"
CPU_CORRECTNESS_NOTE = ("correctness unavailable on CPU: the extension compiled, but this torch build has no CUDA "
                        "and cannot load or run it")
CPU_TIMING_NOTE = "timing unavailable on CPU: CUDA kernels run only on a GPU"


def _build_failure(spec: ExtensionSpec, build: BuildResult) -> tuple[FaultClass, str]:
    if build.status == "timeout":
        return FaultClass.COMPILE_TIMEOUT, f"extension {spec.name!r}: {build.error}"
    if build.status == "toolchain_missing":
        return FaultClass.INTERNAL_ERROR, f"cannot build CUDA extensions here: {build.error}"
    cu = "your cuda_sources" if spec.no_implicit_headers else "your cuda_sources after 3 implicit #include lines"
    files = (f"(cuda.cu is {cu}; main.cpp is '#include <torch/extension.h>', your cpp_sources, then the pybind11 "
             "bindings of `functions`)")
    return FaultClass.CUDA_COMPILE_ERROR, f"extension {spec.name!r} failed to build {files}:\n{build.error}"


def evaluate_cuda(ev: "Evaluator", task: Task, code: str, options: EvalOptions, device: str) -> EvalResult:
    """Evaluate a KernelBench-format CUDA candidate (a module calling ``load_inline``) on ``task``."""
    cpu = device == "cpu"
    base = {"device": CPU_DEVICE, "timing_note": CPU_TIMING_NOTE} if cpu else {}
    static = analyze_cuda_source(code)
    py = static.python
    if py.syntax_error:
        return ev.result(task, device, options, fault=FaultClass.SYNTAX_ERROR, error=py.syntax_error, **base)
    if py.sandbox or static.cpp_sandbox:
        return ev.result(task, device, options, fault=FaultClass.SANDBOX_VIOLATION,
                          error="forbidden in candidate code: " + "; ".join(py.sandbox + static.cpp_sandbox), **base)
    if py.foreign_kernels:
        return ev.result(task, device, options, fault=FaultClass.FORBIDDEN_OP, error="; ".join(py.foreign_kernels),
                          **base)
    if static.spec_error:
        return ev.result(task, device, options, fault=FaultClass.CUDA_COMPILE_ERROR,
                          error=f"cannot build the extension: {static.spec_error}", **base)
    torch_ops = py.torch_ops + static.cpp_torch_ops
    if torch_ops and options.torch_ops == "forbid":  # visible in the text: no need to compile first
        return ev.result(task, device, options, fault=FaultClass.FORBIDDEN_OP,
                          error=f"torch compute ops outside CUDA kernels: {'; '.join(torch_ops)}", **base)
    start = time.monotonic()
    libraries: dict[str, str] = {}
    for spec in static.specs:
        build = build_extension(spec, ev.cuda_build_dir, options.compile_timeout_s)
        if not build.ok:
            fault, error = _build_failure(spec, build)
            return ev.result(task, device, options, fault=fault, error=error,
                              phase_seconds={"cuda_build": round(time.monotonic() - start, 4)}, **base)
        assert build.library is not None
        libraries[spec.key()] = build.library
    phases = {"cuda_build": round(time.monotonic() - start, 4)}
    verdict_static = static.for_verdict()
    if cpu:
        verdict, findings = judge_static(verdict_static, options)
        return ev.result(task, device, options, compiled=True, fault=verdict.fault, error=verdict.error,
                          hacks=findings, phase_seconds=phases,
                          correctness_note=CPU_CORRECTNESS_NOTE if verdict.fault is FaultClass.NONE else None,
                          **base)
    reference, error = ev.reference(task, options, device)
    if reference is None:
        return ev.result(task, device, options, fault=FaultClass.INTERNAL_ERROR, error=error)
    report = ev.run_candidate(task, code, options, device, verdict_static, reference, extra={
        "language": "cuda", "cuda_libraries": libraries, "cuda_kernels": static.kernels})
    result = ev.judge(task, options, device, verdict_static, reference, report)
    result.phase_seconds = {**phases, **result.phase_seconds}
    return result
