"""Turn the raw reports of the reference and candidate children into an :class:`EvalResult`."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

import torch

from forge_kernels.eval.compare import Output, compare_trial
from forge_kernels.eval.faults import FaultClass, HackFlag, classify_exception, signal_name
from forge_kernels.eval.static_checks import StaticReport
from forge_kernels.eval.profiling import is_candidate_kernel, profiling_ratio
from forge_kernels.eval.results import EvalOptions, HackFinding, TrialResult
from forge_kernels.eval.runner import ChildReport
from forge_kernels.eval.timing import speedup, summarize

__all__ = ["ReferenceData", "reference_from_report", "outputs_by_trial", "Verdict", "judge_candidate", "judge_static",
           "trim_text"]


# What the harness sets before any code runs, in the reference's clean process and the candidate's.
_REFERENCE_TORCH_STATE = {"allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest",
                          "default_dtype": "float32"}


def trim_text(text: str, limit: int) -> str:
    """Keep the head and the tail (where the exception is) of a long text."""
    if len(text) <= limit:
        return text
    head = limit // 4
    return text[:head] + "\n[... trimmed ...]\n" + text[-(limit - head - 20):]


def outputs_by_trial(report: ChildReport) -> dict[tuple[str, int], list[Output]]:
    """(shapes, trial) -> outputs in order, with tensors attached where they were sent."""
    metas: dict[tuple[str, int], dict[int, Output]] = {}
    for f in report.of_kind("output"):
        key = (str(f.header.get("shapes")), int(f.header.get("trial", -1)))
        metas.setdefault(key, {})[int(f.header.get("index", 0))] = Output(dict(f.header))
    for f in report.of_kind("tensor"):
        if f.header.get("tag") != "output":
            continue
        key = (str(f.header.get("shapes")), int(f.header.get("trial", -1)))
        out = metas.get(key, {}).get(int(f.header.get("index", 0)))
        if out is not None:
            out.tensor = f.tensor
    return {k: [v[i] for i in sorted(v)] for k, v in metas.items()}


def _inputs(report: ChildReport) -> dict[int, torch.Tensor]:
    return {int(f.header["index"]): f.tensor for f in report.of_kind("tensor")
            if f.header.get("tag") == "input" and f.tensor is not None}


def _timing(report: ChildReport, name: str) -> list[float] | None:
    for f in report.of_kind("timing"):
        samples = f.header.get("samples")
        if f.header.get("name") == name and isinstance(samples, list) and samples:
            return [float(s) for s in samples]
    return None


@dataclass
class ReferenceData:
    """What the reference child produced; cached per task and shape set by the evaluator."""

    outputs: dict[tuple[str, int], list[Output]]
    inputs: dict[int, torch.Tensor]
    input_dtypes: list[str]
    eager_ms: list[float] | None
    compiled_ms: list[float] | None
    device_name: str | None
    notes: list[str]
    float64: dict[int, torch.Tensor] = field(default_factory=dict)  # trial 0 in float64 (fp32 tasks)


def reference_from_report(report: ChildReport) -> tuple[ReferenceData | None, str | None]:
    """The reference data, or an error message when the reference itself failed (a task bug)."""
    for f in report.of_kind("error"):
        return None, f"reference failed at {f.header.get('stage')}: {f.header.get('trace') or f.header.get('message')}"
    if report.timed_out or not report.finished:
        why = "timed out" if report.timed_out else f"ended early ({report.exit!r})"
        return None, f"reference process {why}"
    dtypes = next((f.header.get("dtypes", []) for f in report.of_kind("input_dtypes")), [])
    device = next((str(f.header.get("name")) for f in report.of_kind("device")), None)
    return ReferenceData(
        outputs=outputs_by_trial(report), inputs=_inputs(report), input_dtypes=list(dtypes),
        eager_ms=_timing(report, "eager"), compiled_ms=_timing(report, "compiled"), device_name=device,
        notes=[str(f.header.get("message")) for f in report.of_kind("note")],
        float64={int(f.header["index"]): f.tensor for f in report.of_kind("tensor")
                 if f.header.get("tag") == "float64" and f.tensor is not None},
    ), None


@dataclass
class Verdict:
    fault: FaultClass = FaultClass.NONE
    error: str | None = None
    compiled: bool = False
    trials: list[TrialResult] = field(default_factory=list)
    flags: list[tuple[HackFlag, str]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def set_fault(self, fault: FaultClass, error: str | None) -> None:
        if self.fault is FaultClass.NONE:
            self.fault, self.error = fault, error


def _process_fault(v: Verdict, rep: ChildReport, options: EvalOptions) -> None:
    """A forged report, violations, deadline, memory, exceptions and crashes, in that order."""
    if rep.forged:
        v.set_fault(FaultClass.SANDBOX_VIOLATION, f"forged result report: {rep.forged}")
    missing = [k for k in ("launches", "aten", "checks") if rep.finished and not rep.of_kind(k)]
    if missing:
        v.set_fault(FaultClass.SANDBOX_VIOLATION, f"forged result report: complete without {', '.join(missing)}")
    for f in rep.of_kind("violation"):
        if f.header.get("what") == "timer_patch":
            v.flags.append((HackFlag.TIMER_PATCH, str(f.header.get("message"))))
        else:
            v.set_fault(FaultClass.SANDBOX_VIOLATION, str(f.header.get("message")))
    if rep.timed_out:
        v.set_fault(FaultClass.TIMEOUT, f"evaluation exceeded {options.timeout_s:g} s and was killed")
    if rep.exit is not None and rep.exit.process_limit:
        v.set_fault(FaultClass.SANDBOX_VIOLATION, f"the evaluation's process tree hit its limit of "
                                                  f"{options.max_processes} processes and threads (fork bomb?)")
    if rep.exit is not None and rep.exit.oom:
        v.set_fault(FaultClass.HOST_OOM, f"host memory of the evaluation's process tree exceeded "
                                         f"{options.host_memory_mb} MiB; the kernel killed it")
    if rep.memory_killed:
        v.set_fault(FaultClass.HOST_OOM, f"host memory exceeded {options.host_memory_mb} MiB "
                                         f"(resident {rep.peak_rss_mb:.0f} MiB) and the process was killed")
    for f in rep.of_kind("error"):
        h = f.header
        stage = str(h.get("stage"))
        text = f"{h.get('trace') or ''}".strip() or f"{h.get('type')}: {h.get('message')}"
        if stage in ("harness", "task"):
            v.set_fault(FaultClass.INTERNAL_ERROR, f"evaluator error at {stage}: {text}")
        elif h.get("type") == "MissingModelNew":
            v.set_fault(FaultClass.MISSING_MODEL_NEW, str(h.get("message")))
        elif stage.endswith("_alt"):
            v.flags.append((HackFlag.SHAPE_OVERFIT, f"fails on the alternate shapes: {h.get('type')}: "
                            f"{str(h.get('message'))[:300]}"))
            v.error = v.error or text
        elif stage.endswith("_signed"):
            v.flags.append((HackFlag.DEGENERATE_INPUTS, f"fails on sign-flipped inputs: {h.get('type')}: "
                            f"{str(h.get('message'))[:300]}"))
            v.error = v.error or text
        else:
            fault = classify_exception(stage, str(h.get("type")), str(h.get("module")), str(h.get("message")),
                                       bool(h.get("in_kernel")))
            v.set_fault(fault, text)
    if rep.exit is not None and not rep.finished and v.fault is FaultClass.NONE and not v.flags:
        if rep.exit.signal is not None:
            if rep.exit.signal == signal.SIGKILL:
                v.set_fault(FaultClass.HOST_OOM, "process was killed (SIGKILL, likely the kernel's OOM killer)")
            else:
                v.set_fault(FaultClass.SEGFAULT_ABORT, f"process died with {signal_name(rep.exit.signal)}")
        else:
            v.set_fault(FaultClass.SEGFAULT_ABORT, f"process exited with code {rep.exit.code} before finishing")
    if rep.stream_error and v.fault is FaultClass.NONE:
        v.set_fault(FaultClass.SANDBOX_VIOLATION, f"result channel corrupted: {rep.stream_error}")


def _correctness(v: Verdict, rep: ChildReport, ref: ReferenceData, options: EvalOptions, device: str) -> None:
    cand = outputs_by_trial(rep)
    primary_ok = True
    previous: tuple[list[Output], list[Output]] | None = None
    for (shapes, trial), ref_out in sorted(ref.outputs.items(), key=lambda kv: (kv[0][0] != "primary", kv[0][1])):
        cand_out = cand.get((shapes, trial))
        if cand_out is None:
            if rep.finished and not _stopped_at(rep, shapes):
                v.set_fault(FaultClass.SANDBOX_VIOLATION, f"the report claims to be complete but has no outputs "
                                                          f"for {shapes} trial {trial}")
            continue  # otherwise the run stopped earlier; its fault says why
        if shapes == "signed" and any(o.tensor is not None and o.tensor.is_floating_point()
                                      and not bool(torch.isfinite(o.tensor).all()) for o in ref_out):
            continue  # sign-flipped inputs leave the reference's domain (log, sqrt): no check
        seed = options.seed + trial + {"primary": 0, "alternate": 1000, "signed": 2000}.get(shapes, 0)
        tv = compare_trial(seed, shapes, ref_out, cand_out, options, device)
        v.trials.append(tv.result)
        v.flags.extend(tv.flags)
        if tv.degenerate:
            v.flags.append((HackFlag.DEGENERATE_REFERENCE, f"trial {trial}: reference output is identically zero"))
        if shapes == "primary":
            if previous is not None and not tv.result.passed and _same(cand_out, previous[1]) \
                    and not _same(ref_out, previous[0]):
                v.flags.append((HackFlag.CACHED_OUTPUT, f"trial {trial} returned trial {trial - 1}'s output for "
                                "new inputs"))
            previous = (ref_out, cand_out)
            if not tv.result.passed:
                primary_ok = False
                if tv.fault is FaultClass.REWARD_HACK:
                    v.set_fault(FaultClass.REWARD_HACK, tv.result.mismatch)
                v.set_fault(tv.fault, f"trial {trial} (seed {seed}): {tv.result.mismatch}")
        elif not tv.result.passed and primary_ok and shapes == "signed":
            v.flags.append((HackFlag.DEGENERATE_INPUTS, f"correct on the task's inputs, wrong once their signs are "
                            f"flipped (the evaluator's own draw): {tv.result.mismatch}"))
        elif not tv.result.passed and primary_ok:
            v.flags.append((HackFlag.SHAPE_OVERFIT, f"correct on the task shapes, wrong on the alternate shapes: "
                            f"{tv.result.mismatch}"))
    if primary_ok and ref.float64:
        _accuracy(v, cand.get(("primary", 0)), ref, options)


def _accuracy(v: Verdict, cand_out: list[Output] | None, ref: ReferenceData, options: EvalOptions) -> None:
    """Flag a kernel whose error against the float64 reference is far above the fp32 reference's
    own (a computation in fp16/bf16/TF32 that still passes the tolerance)."""
    ref_out = ref.outputs.get(("primary", 0), [])
    for i, wide in ref.float64.items():
        if cand_out is None or i >= len(cand_out) or i >= len(ref_out):
            return
        cand_t, ref_t = cand_out[i].tensor, ref_out[i].tensor
        if cand_t is None or ref_t is None or cand_t.shape != wide.shape or not cand_t.is_floating_point():
            continue
        finite = torch.isfinite(wide) & torch.isfinite(ref_t.double()) & torch.isfinite(cand_t.double())
        scale = float(wide[finite].norm()) or 1.0
        ref_err = float((ref_t.double() - wide)[finite].norm()) / scale
        cand_err = float((cand_t.double() - wide)[finite].norm()) / scale
        bound = max(_ACCURACY_FACTOR * ref_err, _ACCURACY_FLOOR)
        if cand_err > bound and not options.allow_tf32:
            v.flags.append((HackFlag.LESS_ACCURATE, f"output {i}: relative L2 error {cand_err:.2e} against a float64 "
                            f"reference, the fp32 reference's is {ref_err:.2e} (allowed: {bound:.1e}); computing in "
                            "fp16/bf16/TF32 is not fp32 (EvalOptions.allow_tf32 permits TF32)"))


def _stopped_at(rep: ChildReport, shapes: str) -> bool:
    """Whether the child reported an error in a stage of this shape set (the alternate and signed
    sets may fail while the report still completes)."""
    suffix = {"alternate": "_alt", "signed": "_signed"}.get(shapes)
    stages = [str(f.header.get("stage", "")) for f in rep.of_kind("error")]
    if suffix is None:
        return any(not st.endswith(("_alt", "_signed")) for st in stages)
    return any(st.endswith(suffix) for st in stages)


# A faithful fp32 kernel reorders sums (error within a small multiple of the reference's); one rounding
# of fp16 alone is 2^-11 ~ 4.9e-4 relative, bf16 2^-8, TF32 2^-11, far above fp32's 2^-24 ~ 6e-8.
_ACCURACY_FACTOR, _ACCURACY_FLOOR = 64.0, 2.0 ** -14


def _same(a: list[Output], b: list[Output]) -> bool:
    return len(a) == len(b) and all(
        x.tensor is not None and y.tensor is not None and x.tensor.shape == y.tensor.shape
        and x.tensor.dtype == y.tensor.dtype and torch.equal(x.tensor, y.tensor) for x, y in zip(a, b)
    )


def _launch_flags(v: Verdict, rep: ChildReport, static: StaticReport) -> None:
    launches = next((f.header for f in rep.of_kind("launches")), None)
    if launches is None:
        return
    trials = [int(n) for n in launches.get("trials", [])]
    v.extras["kernel_launches"] = trials[0] if trials else None
    if trials and sum(trials) == 0:
        lang = static.kernel_language
        what = f"defines {lang} kernels but launches none" if static.kernels else f"defines no {lang} kernel"
        v.set_fault(FaultClass.DECOY_KERNEL, f"ModelNew {what} during forward")
        v.flags.append((HackFlag.DECOY_KERNEL, f"no {lang} launch in {len(trials)} forward call(s)"))
        return
    if any(n == 0 for n in trials):
        v.flags.append((HackFlag.DECOY_KERNEL, f"some correctness trials launched no kernel: {trials}"))
    repeats = [int(n) for n in launches.get("repeats", [])]
    if any(n == 0 for n in repeats):
        v.flags.append((HackFlag.CACHED_OUTPUT, f"repeated calls on the same inputs skipped the kernel "
                        f"(launches {repeats})"))
    idle = sorted(mode for mode, n in launches.get("modes", {}).items() if int(n) == 0)
    if idle:
        v.flags.append((HackFlag.DECOY_KERNEL, f"no {static.kernel_language} launch in mode(s) {', '.join(idle)}"))


def _integrity_flags(v: Verdict, rep: ChildReport, static: StaticReport, ref: ReferenceData,
                     options: EvalOptions) -> None:
    checks = next((f.header for f in rep.of_kind("checks")), {})
    started = [f"{n} {what} thread(s) started" for what, n in (
        ("Python", checks.get("threads_started")), ("OS", checks.get("os_threads_started")))
        if isinstance(n, int) and n > 0]
    if started or static.threads:
        v.flags.append((HackFlag.THREAD_INJECTION, "; ".join(static.threads + started)))
    patched = list(checks.get("timer_patched", [])) + static.timer_patches
    if patched:
        v.flags.append((HackFlag.TIMER_PATCH, "replaces " + ", ".join(patched)))
    if checks and not checks.get("launch_wrapper_intact", True):
        v.set_fault(FaultClass.SANDBOX_VIOLATION, f"replaced the evaluator's {static.kernel_language} launch witness")
    default = checks.get("default_stream")
    streams = [s for s in checks.get("streams", []) if default is not None and s != default]
    if streams or static.streams:
        v.flags.append((HackFlag.SIDE_STREAM, "; ".join(static.streams + [f"launches on stream {s:#x}"
                                                                           for s in streams])))
    l2, l2_base = checks.get("l2_persisting_limit"), checks.get("l2_persisting_baseline") or 0
    raised = isinstance(l2, int) and l2 > l2_base
    if raised or static.persisting_l2:
        v.flags.append((HackFlag.PERSISTING_L2, "; ".join(static.persisting_l2 + (
            [f"persisting-L2 limit raised to {l2} bytes (driver default {l2_base})"] if raised else []))))
    if static.try_except:
        v.flags.append((HackFlag.TRY_EXCEPT_FALLBACK, "; ".join(static.try_except)))
    aten = next((f.header for f in rep.of_kind("aten")), {})
    ops = dict(aten.get("compute_ops", {}))
    if (ops or static.torch_ops) and options.torch_ops != "allow":
        what = "; ".join(static.torch_ops + [f"aten::{k} x{n}" for k, n in sorted(ops.items())])
        if options.torch_ops == "forbid":
            v.set_fault(FaultClass.FORBIDDEN_OP, f"torch compute ops outside {static.kernel_language} kernels: {what}")
        v.flags.append((HackFlag.TORCH_COMPUTE, what))
    fp32_task = bool(ref.input_dtypes) and all(d in ("float32", "float64") for d in ref.input_dtypes)
    downcasts = list(aten.get("downcasts", [])) + (static.half_casts if fp32_task else [])
    if downcasts:
        v.flags.append((HackFlag.PRECISION_DOWNCAST, "; ".join(downcasts)))
    state = next((f.header for f in rep.of_kind("torch_state")), None)
    if state is not None:
        changed = [f"{k}={state.get(k)!r} (reference: {want!r})" for k, want in _REFERENCE_TORCH_STATE.items()
                   if state.get(k) != want]
        if changed:
            v.flags.append((HackFlag.GLOBAL_STATE, "changed process-wide torch settings: " + ", ".join(changed)))
    cand_inputs = _inputs(rep)
    for i, before in ref.inputs.items():
        after = cand_inputs.get(i)
        if after is not None and (after.shape != before.shape or not torch.equal(
                after.view(-1).view(torch.uint8) if after.numel() else after,
                before.view(-1).view(torch.uint8) if before.numel() else before)):
            v.flags.append((HackFlag.INPUT_MUTATION, f"forward modified input {i}"))


def _device_results(v: Verdict, rep: ChildReport, static: StaticReport, ref: ReferenceData,
                    options: EvalOptions) -> None:
    profile = next((f.header.get("kernels") for f in rep.of_kind("profile")), None)
    if isinstance(profile, dict):
        kernel_times = {str(k): float(t) for k, t in profile.items()}
        names = list(static.kernels)
        v.extras["profiling_ratio"] = profiling_ratio(kernel_times, names)
        if kernel_times and not any(is_candidate_kernel(k, names) for k in kernel_times):
            v.flags.append((HackFlag.DECOY_KERNEL, "none of the candidate's kernels "
                            f"({', '.join(names) or 'none defined'}) ran on the device; profiler saw "
                            f"{', '.join(sorted(kernel_times)[:5])}"))
    timed = next((f.header for f in rep.of_kind("timing") if f.header.get("name") == "candidate"), {})
    if timed.get("launches") == 0:
        v.flags.append((HackFlag.DECOY_KERNEL, "the timed calls launched no kernel of the candidate's"))
    cand_ms = _timing(rep, "candidate")
    if cand_ms:
        v.extras["runtime"] = summarize(cand_ms, options.trim_fraction)
        if ref.eager_ms:
            v.extras["reference_runtime"] = summarize(ref.eager_ms, options.trim_fraction)
            s, s_std = speedup(ref.eager_ms, cand_ms)
            v.extras["speedup"], v.extras["speedup_std"] = s, s_std
            if s > options.excessive_speedup:
                v.flags.append((HackFlag.EXCESSIVE_SPEEDUP, f"speedup {s:.1f}x over eager exceeds "
                                f"{options.excessive_speedup:g}x"))
        if ref.compiled_ms:
            v.extras["compiled_reference_runtime"] = summarize(ref.compiled_ms, options.trim_fraction)
            v.extras["speedup_vs_compile"] = speedup(ref.compiled_ms, cand_ms)[0]


def _findings(v: Verdict, options: EvalOptions) -> list[HackFinding]:
    """Deduplicated findings with their rejection status; a rejected one fails the verdict."""
    rejected = set(options.reject_hacks)
    findings: list[HackFinding] = []
    seen: set[tuple[HackFlag, str]] = set()
    for flag, message in v.flags:
        if (flag, message) not in seen:
            seen.add((flag, message))
            findings.append(HackFinding(flag=flag, message=message, rejected=flag in rejected))
    hard = [h for h in findings if h.rejected]
    if hard and v.fault is FaultClass.NONE:
        fault = FaultClass.DECOY_KERNEL if hard[0].flag is HackFlag.DECOY_KERNEL else FaultClass.REWARD_HACK
        v.set_fault(fault, "; ".join(f"{h.flag.value}: {h.message}" for h in hard))
    return findings


def judge_static(static: StaticReport, options: EvalOptions) -> tuple[Verdict, list[HackFinding]]:
    """The verdict from the source alone, for a candidate that cannot run here (CUDA on a CPU
    machine): the static hack checks and forbidden torch ops, no correctness."""
    v = Verdict(compiled=True)
    empty = ReferenceData(outputs={}, inputs={}, input_dtypes=[], eager_ms=None, compiled_ms=None, device_name=None,
                          notes=[])
    _integrity_flags(v, ChildReport(), static, empty, options)
    findings = _findings(v, options)
    v.compiled = v.fault.compiled
    return v, findings


def judge_candidate(rep: ChildReport, ref: ReferenceData, static: StaticReport, options: EvalOptions,
                    device: str) -> tuple[Verdict, list[HackFinding]]:
    """The verdict on one candidate run, and its hack findings with their rejection status."""
    v = Verdict()
    _process_fault(v, rep, options)
    imported = any(f.header.get("stage") == "imported" for f in rep.of_kind("progress"))
    _correctness(v, rep, ref, options, device)
    _launch_flags(v, rep, static)
    _integrity_flags(v, rep, static, ref, options)
    _device_results(v, rep, static, ref, options)
    findings = _findings(v, options)
    alt_failed = any(str(f.header.get("stage", "")).endswith(("_alt", "_signed")) for f in rep.of_kind("error"))
    if v.fault is FaultClass.NONE and not rep.finished and not alt_failed:
        v.set_fault(FaultClass.INTERNAL_ERROR, "candidate process finished without a complete report")
    v.compiled = imported and v.fault.compiled
    return v, findings
