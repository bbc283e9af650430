"""Feedback text for multi-turn episodes: what went wrong (or how fast it was), for the model."""

from __future__ import annotations

from forge_kernels.eval.faults import FaultClass
from forge_kernels.eval.results import EvalResult

__all__ = ["format_feedback"]

_FAULT_TEXT = {
    FaultClass.NONE: "The kernel is correct.",
    FaultClass.SYNTAX_ERROR: "The code has a syntax error.",
    FaultClass.IMPORT_ERROR: "The module failed to import.",
    FaultClass.TRITON_COMPILE_ERROR: "A Triton kernel failed to compile.",
    FaultClass.CUDA_COMPILE_ERROR: "The CUDA extension failed to build (nvcc, the C++ compiler or the linker "
                                   "rejected it).",
    FaultClass.COMPILE_TIMEOUT: "Building the CUDA extension took too long and was stopped: simplify the code "
                                "(fewer template instantiations, smaller unrolled loops).",
    FaultClass.MISSING_MODEL_NEW: "The code does not define `class ModelNew(nn.Module)`.",
    FaultClass.INIT_ERROR: "`ModelNew(...)` raised while being constructed.",
    FaultClass.RUNTIME_ERROR: "`ModelNew.forward` raised an error.",
    FaultClass.ILLEGAL_MEMORY_ACCESS: "A kernel accessed memory out of bounds (illegal memory access): check masks "
                                      "and offsets.",
    FaultClass.SEGFAULT_ABORT: "The process crashed (segfault/abort): likely an out-of-bounds access.",
    FaultClass.GPU_OOM: "The GPU ran out of memory.",
    FaultClass.HOST_OOM: "Host memory limit exceeded.",
    FaultClass.SHARED_MEMORY_EXCEEDED: "A kernel needs more shared memory than the GPU has: use smaller blocks "
                                       "or fewer stages.",
    FaultClass.TIMEOUT: "The evaluation timed out.",
    FaultClass.OUTPUT_SHAPE_MISMATCH: "The output has the wrong shape or number of outputs.",
    FaultClass.OUTPUT_DTYPE_MISMATCH: "The output has the wrong dtype or type.",
    FaultClass.OUTPUT_VALUE_MISMATCH: "The output values do not match the reference.",
    FaultClass.OUTPUT_NAN: "The output has NaN/Inf values where the reference does not.",
    FaultClass.DECOY_KERNEL: "No {lang} kernel actually ran: the work must be done by your {lang} kernels.",
    FaultClass.FORBIDDEN_OP: "PyTorch compute ops were used outside {lang} kernels; only allocation, views and "
                             "copies are allowed there.",
    FaultClass.SANDBOX_VIOLATION: "The code did something the sandbox forbids (network, files, processes, "
                                  "patching the harness).",
    FaultClass.REWARD_HACK: "The evaluator rejected the kernel as a reward hack.",
    FaultClass.INTERNAL_ERROR: "The evaluator failed (not your fault); the kernel could not be judged.",
}


_CUT_HEAD = "[... trimmed]\n"
_CUT_TAIL = "\n[... trimmed]"
_MIN_DETAILS = 120  # below this, keep the details' start and cut the text's end instead


def format_feedback(result: EvalResult, max_chars: int = 2000, language: str = "Triton") -> str:
    """A short report: fault class, trimmed error, correctness deltas, timing summary, hack flags.
    ``language`` names the kernels the model writes (``Triton``, ``CUDA``)."""
    lines = [f"Result: {result.fault.value}. {_FAULT_TEXT[result.fault].format(lang=language)}"]
    details = None
    if result.error and result.fault is not FaultClass.NONE:
        details = len(lines)
        lines.append("Details:\n" + result.error.strip())
    failed = [t for t in result.trials if not t.passed]
    if result.trials:
        lines.append(f"Correctness: {len(result.trials) - len(failed)}/{len(result.trials)} trials passed.")
    for t in failed[:2]:
        errs = f" (max abs error {t.max_abs_error:.3g}, max rel error {t.max_rel_error:.3g})" \
            if t.max_abs_error is not None and t.max_rel_error is not None else ""
        lines.append(f"- seed {t.seed} ({t.shapes} shapes): {t.mismatch}{errs}")
    for h in result.hacks:
        lines.append(f"{'Rejected' if h.rejected else 'Warning'} ({h.flag.value}): {h.message}")
    if result.timing_available and result.runtime is not None:
        t = f"Timing: {result.runtime.median_ms:.4f} ms (median, IQR {result.runtime.spread_ms:.4f})"
        if result.reference_runtime is not None and result.speedup is not None:
            t += (f"; reference {result.reference_runtime.median_ms:.4f} ms; speedup {result.speedup:.2f}x"
                  f" ± {result.speedup_std or 0:.2f}")
        if result.speedup_vs_compile is not None:
            t += f"; vs torch.compile {result.speedup_vs_compile:.2f}x"
        lines.append(t + ".")
    elif result.correct:
        lines.append(f"Timing: {result.timing_note or 'unavailable'}.")
    if result.correctness_note:
        lines.append(f"Correctness: {result.correctness_note}.")
    text = "\n".join(lines)
    if len(text) > max_chars and details is not None:
        # a traceback's end (the exception, the frame that raised it) says what went wrong, its
        # start is mostly framework frames: the details lose their beginning first
        error = lines[details].removeprefix("Details:\n")
        keep = len(error) - (len(text) - max_chars) - len(_CUT_HEAD)
        if keep >= _MIN_DETAILS:
            tail = error[-keep:]
            lines[details] = "Details:\n" + _CUT_HEAD + tail[tail.find("\n") + 1:]  # from a line start
            text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - len(_CUT_TAIL)] + _CUT_TAIL
