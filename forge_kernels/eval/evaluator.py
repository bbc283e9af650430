"""The public evaluator: ``Evaluator().evaluate(task, code, options) -> EvalResult``.

Per evaluation: static checks of the source; the reference outputs (and, on a GPU, its eager and
torch.compile timings) from a child that never sees candidate code, cached per task and shape set;
then the candidate in a fresh child forked from the warm zygote. Both children run in the OS jail
(:mod:`forge_kernels.eval.isolation`) under a deadline and a memory bound for their whole process
tree. The verdict is formed here, from raw data.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forge_kernels.eval.cuda.build import default_build_root
from forge_kernels.eval.deadlines import eval_deadlines
from forge_kernels.eval.faults import FaultClass
from forge_kernels.eval.isolation.jail import SANDBOX_ENV_KEYS, JailError
from forge_kernels.eval.static_checks import StaticReport, analyze_source
from forge_kernels.eval.request import ChildRequest
from forge_kernels.eval.results import EvalOptions, EvalResult, HackFinding, loosened_for
from forge_kernels.eval.runner import ChildReport, run_request
from forge_kernels.eval.verdict import ReferenceData, Verdict, judge_candidate, reference_from_report, trim_text
from forge_kernels.eval.zygote import ZygoteClient, ZygoteDied
from forge_kernels.tasks.task import Task

__all__ = ["Evaluator"]

_CPU_DEVICE = "cpu (triton interpreter)"
_REFERENCE_CACHE = 64


def _cuda_visible() -> bool:
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.is_available()


class Evaluator:
    """Evaluates candidate kernels against tasks. Thread-safe; one warm zygote per device kind.

    Use as a context manager (or call :meth:`close`) to stop the zygote when done.
    """

    def __init__(self, options: EvalOptions | None = None, triton_cache_dir: str | None = None,
                 timing_lock: str | None = None, cuda_build_dir: str | None = None) -> None:
        """``timing_lock``: path of a lock file that every child holds (``flock``) while it times on
        the GPU, so evaluators sharing the path never time two kernels on one device at once.
        ``cuda_build_dir``: the build cache of CUDA candidates (default: ``default_build_root()``)."""
        self.options = options or EvalOptions()
        self.timing_lock = timing_lock
        self.cuda_build_dir = cuda_build_dir or default_build_root()
        self.triton_cache_dir = triton_cache_dir or os.environ.get("TRITON_CACHE_DIR") or str(
            Path.home() / ".triton" / "cache"
        )
        self._zygotes: dict[str, ZygoteClient] = {}
        self._lock = threading.Lock()
        self._references: OrderedDict[str, ReferenceData] = OrderedDict()
        self._probes: dict[str, bool] = {}  # whether a known-good probe gets a verdict, per task and options
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the zygotes; evaluations still running (or started later) fail with ``ZygoteDied``."""
        with self._lock:
            self._closed = True
            for z in self._zygotes.values():
                z.close()
            self._zygotes.clear()

    def resolve_device(self, options: EvalOptions | None = None) -> str:
        """``cpu`` or ``cuda`` for these options (``auto`` picks cuda when a GPU is visible)."""
        options = options or self.options
        if options.device == "auto":
            return "cuda" if _cuda_visible() else "cpu"
        if options.device == "cuda" and not _cuda_visible():
            raise ValueError("EvalOptions.device='cuda' but no CUDA device is visible; use 'cpu' or 'auto'")
        return options.device

    def zygote(self, device: str) -> ZygoteClient:
        """The (started) zygote for ``device``."""
        with self._lock:
            if self._closed:
                raise ZygoteDied("the evaluator is closed")
            z = self._zygotes.get(device)
            if z is None:
                z = self._zygotes[device] = ZygoteClient(self._zygote_env(device))
        z.ensure_running()
        return z

    def _checked_zygote(self, device: str, options: EvalOptions) -> ZygoteClient:
        z = self.zygote(device)
        if options.isolation == "os" and z.jail_unavailable:
            raise JailError(f"the OS jail for evaluated code cannot be built on this machine: {z.jail_unavailable}. "
                            "Run where unprivileged user namespaces are allowed (or as root), or set "
                            "EvalOptions.isolation='audit' for trusted code only (no security boundary).")
        return z

    def _zygote_env(self, device: str) -> dict[str, str]:
        """The zygote's environment: an allow-list of this process's (a jailed child can read its
        zygote's start-up environment in ``/proc/self/environ``, so nothing else goes in)."""
        env = {k: v for k, v in os.environ.items() if k.startswith(SANDBOX_ENV_KEYS)}
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                      if p])
        env["HOME"] = os.environ.get("HOME", "/tmp")
        env["TRITON_CACHE_DIR"] = self.triton_cache_dir  # the zygote's own warm-up; jailed children get a private one
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"  # must be set before triton is imported in the zygote
        else:
            env.pop("TRITON_INTERPRET", None)
        return env

    # -- evaluation --------------------------------------------------------------------------------
    async def aevaluate(self, task: Task, code: str, options: EvalOptions | None = None) -> EvalResult:
        """:meth:`evaluate` in a worker thread, so an asyncio caller keeps its loop free."""
        return await asyncio.to_thread(self.evaluate, task, code, options)

    def evaluate(self, task: Task, code: str, options: EvalOptions | None = None) -> EvalResult:
        """Evaluate candidate ``code`` (a module defining ``ModelNew``) on ``task``."""
        options = loosened_for(task, options or self.options)
        start = time.monotonic()
        device = self.resolve_device(options)
        try:
            result = self._evaluate(task, code, options, device)
        except Exception as err:  # an evaluator bug: never blamed on the candidate
            result = self.result(task, device, options, fault=FaultClass.INTERNAL_ERROR,
                                  error=f"evaluator error: {type(err).__name__}: {err}")
        result.wall_time_s = time.monotonic() - start
        return result

    # -- the language plug-in API (``forge_kernels.eval.cuda.evaluate`` uses it) -------------------
    def result(self, task: Task, device_kind: str, options: EvalOptions, **fields: Any) -> EvalResult:
        """An :class:`EvalResult` for ``task`` with the device's notes and trimmed error text."""
        fields.setdefault("compiled", False)
        fields.setdefault("correct", False)
        if fields.get("error"):
            fields["error"] = trim_text(fields["error"], options.max_error_chars)
        timing_note = None
        if device_kind == "cpu":
            timing_note = "timing unavailable on CPU: the Triton interpreter's speed says nothing about a GPU"
        elif not options.timing:
            timing_note = "timing disabled (EvalOptions.timing=false)"
        fields.setdefault("timing_note", timing_note)
        fields.setdefault("device", _CPU_DEVICE if device_kind == "cpu" else "cuda")
        return EvalResult(task=task.name, **fields)

    def _evaluate(self, task: Task, code: str, options: EvalOptions, device: str) -> EvalResult:
        if options.language == "cuda":
            from forge_kernels.eval.cuda.evaluate import evaluate_cuda

            return evaluate_cuda(self, task, code, options, device)
        static = analyze_source(code)
        if static.syntax_error:
            return self.result(task, device, options, fault=FaultClass.SYNTAX_ERROR, error=static.syntax_error)
        if static.sandbox:
            return self.result(task, device, options, fault=FaultClass.SANDBOX_VIOLATION,
                                error="forbidden in candidate code: " + "; ".join(static.sandbox))
        if static.foreign_kernels:
            return self.result(task, device, options, fault=FaultClass.FORBIDDEN_OP,
                                error="; ".join(static.foreign_kernels))
        reference, error = self.reference(task, options, device)
        if reference is None:
            return self.result(task, device, options, fault=FaultClass.INTERNAL_ERROR, error=error)
        report = self.run_candidate(task, code, options, device, static, reference)
        return self.judge(task, options, device, static, reference, report)

    def judge(self, task: Task, options: EvalOptions, device: str, static: StaticReport, reference: ReferenceData,
                report: ChildReport) -> EvalResult:
        """The result of a candidate run: the verdict on the child's report against the reference.
        An ``internal_error`` stays one only if a known-good probe fails the same way: a candidate
        must never be able to turn its own failure into a dropped sample."""
        try:
            verdict, findings = judge_candidate(report, reference, static, options, device)
        except Exception as err:  # the report's contents (candidate-writable) broke the judge
            verdict, findings = Verdict(fault=FaultClass.INTERNAL_ERROR, error=f"judging the report failed: "
                                                                                f"{type(err).__name__}: {err}"), []
        if verdict.fault is FaultClass.INTERNAL_ERROR and self._harness_works(task, options, device, reference):
            verdict.fault = FaultClass.RUNTIME_ERROR
            verdict.error = ("the evaluator's harness failed with this candidate only (a known-good probe of the "
                             f"same task passed): {verdict.error}")
        correct = verdict.fault is FaultClass.NONE and bool(verdict.trials) and all(
            t.passed for t in verdict.trials if t.shapes == "primary")
        timing_available = "runtime" in verdict.extras
        notes = [str(f.header.get("message")) for f in report.of_kind("note")]
        timing_note = None
        if device == "cuda" and options.timing and not timing_available:
            timing_note = "no timing: the candidate did not complete the correctness stage"
        return self.result(
            task, device, options,
            compiled=verdict.compiled, correct=correct, fault=verdict.fault, error=verdict.error,
            trials=verdict.trials, hacks=findings, timing_available=timing_available,
            **({"timing_note": timing_note} if device == "cuda" else {}),
            runtime=verdict.extras.get("runtime"), reference_runtime=verdict.extras.get("reference_runtime"),
            compiled_reference_runtime=verdict.extras.get("compiled_reference_runtime"),
            speedup=verdict.extras.get("speedup"), speedup_std=verdict.extras.get("speedup_std"),
            speedup_vs_compile=verdict.extras.get("speedup_vs_compile"),
            profiling_ratio=verdict.extras.get("profiling_ratio"),
            kernel_launches=verdict.extras.get("kernel_launches"), sandbox_notes=notes,
            phase_seconds=report.phase_seconds(),
            device=reference.device_name or (_CPU_DEVICE if device == "cpu" else "cuda"),
        )

    def _harness_works(self, task: Task, options: EvalOptions, device: str, reference: ReferenceData) -> bool:
        """Run the reference itself as the candidate (``class ModelNew(Model)``) through the same
        path; True when it gets a real verdict. Cached per task and options."""
        key = hashlib.sha256(json.dumps([task.source, options.model_dump(mode="json"), device],
                                        sort_keys=True).encode()).hexdigest()
        with self._lock:
            if key in self._probes:
                return self._probes[key]
        probe_options = options.model_copy(update={"torch_ops": "allow", "reject_hacks": []})
        probe = task.source + "\n\nclass ModelNew(Model):\n    pass\n"
        try:
            report = self.run_candidate(task, probe, probe_options, device, StaticReport(), reference)
            verdict, _ = judge_candidate(report, reference, StaticReport(), probe_options, device)
            works = verdict.fault is not FaultClass.INTERNAL_ERROR
        except Exception:  # noqa: BLE001 - the evaluator itself is broken for this task
            works = False
        with self._lock:
            self._probes[key] = works
        return works

    # -- children ---------------------------------------------------------------------------------
    def child_request(self, task: Task, options: EvalOptions, device: str, role: str,
                      tmp: str | None = None) -> ChildRequest:
        """The request of one child for ``task`` under ``options`` (``tmp``: a host temp dir,
        only without the jail)."""
        device_class = "cpu" if device == "cpu" else "gpu"
        alt = task.shape_overrides(device_class, alternate=True) if task.alt_shapes.get(device_class) else None
        return ChildRequest(
            role=role, device=device, device_index=options.device_index, tmp_dir=tmp,  # type: ignore[arg-type]
            task_source=task.source, overrides=task.shape_overrides(device_class), alt_overrides=alt,
            seed=options.seed, trials=options.trials, alt_trials=options.alt_shape_trials,
            host_memory_mb=options.host_memory_mb, address_space_limit=options.address_space_limit,
            isolation=options.isolation, max_processes=options.max_processes, tmp_size_mb=options.tmp_size_mb,
            timing=options.timing and device == "cuda", warmup=options.warmup, repeats=options.repeats,
            compile_baseline=options.compile_baseline, profile=options.profile and device == "cuda",
            timing_lock=self.timing_lock,
        )

    def _run(self, request: ChildRequest, options: EvalOptions, device: str, timeout_s: float) -> ChildReport:
        """Run a request; if the zygote dies under it, restart the zygote and try once more."""
        for attempt in (1, 2):
            zygote = self._checked_zygote(device, options)
            try:
                return run_request(zygote, request, timeout_s, options.host_memory_mb)
            except ZygoteDied:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _host_tmp(self, options: EvalOptions, prefix: str) -> Iterator[str | None]:
        """A host temp dir for the child, only without the jail (a jailed child has its own /tmp)."""
        if options.isolation == "os":
            yield None
            return
        tmp = tempfile.mkdtemp(prefix=prefix)
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def reference(self, task: Task, options: EvalOptions, device: str) -> tuple[ReferenceData | None, str | None]:
        """The reference's outputs (and timings), from a jailed child that never sees candidate code;
        cached per task, options and shapes. ``(None, why)`` when the reference itself failed."""
        with self._host_tmp(options, "fk-ref-") as tmp:
            request = self.child_request(task, options, device, "reference", tmp)
            key = hashlib.sha256(json.dumps(request.cache_key_fields(), sort_keys=True, default=str).encode()).hexdigest()
            with self._lock:
                if key in self._references:
                    self._references.move_to_end(key)
                    return self._references[key], None
            report = self._run(request, options, device, eval_deadlines(options).reference_s)
        reference, error = reference_from_report(report)
        if reference is not None:
            with self._lock:
                self._references[key] = reference
                while len(self._references) > _REFERENCE_CACHE:
                    self._references.popitem(last=False)
        return reference, error

    def run_candidate(self, task: Task, code: str, options: EvalOptions, device: str, static: StaticReport,
                       reference: ReferenceData, extra: dict[str, Any] | None = None) -> ChildReport:
        """Run the candidate in a fresh child; ``extra`` adds request fields (e.g. CUDA libraries)."""
        with self._host_tmp(options, "fk-eval-") as tmp:
            request = dataclasses.replace(
                self.child_request(task, options, device, "candidate", tmp), candidate_source=code,
                kernels={k: list(v) for k, v in static.kernels.items()},
                expected={shapes: [[o.meta["dtype"], o.meta["shape"]] for o in outs]
                          for (shapes, trial), outs in reference.outputs.items() if trial == 0},
                **(extra or {}))
            return self._run(request, options, device, eval_deadlines(options).candidate_s)


def hack_summary(findings: list[HackFinding]) -> str:
    """One line per finding, for logs."""
    return "\n".join(f"{'REJECT' if h.rejected else 'warn'} {h.flag.value}: {h.message}" for h in findings)

