"""Typed options and results of one kernel evaluation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel
from forge_kernels.eval.faults import DEFAULT_REJECTED_HACKS, FaultClass, HackFlag

__all__ = [
    "EvalOptions",
    "EvalResult",
    "HackFinding",
    "RuntimeStats",
    "Tolerance",
    "TrialResult",
    "DEFAULT_TOLERANCES",
]


class Tolerance(StrictModel):
    """``|candidate - reference| <= atol + rtol * |reference|`` elementwise."""

    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


# fp32 strict; half types loose (10 and 7 mantissa bits); integer types exact.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(atol=1e-6, rtol=1e-6),
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    "float16": Tolerance(atol=1e-2, rtol=1e-2),
    "bfloat16": Tolerance(atol=2e-2, rtol=2e-2),
}


class EvalOptions(StrictModel):
    """How one candidate is evaluated. Every field is a YAML key of the eval section."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="cuda when a GPU is visible (auto), else the Triton interpreter"
    )
    device_index: int = Field(default=0, ge=0, description="which GPU the child process takes")
    language: Literal["triton", "cuda"] = Field(
        default="triton", description="candidate kernels: @triton.jit, or CUDA C++ built with load_inline"
    )
    compile_timeout_s: float = Field(default=300.0, gt=0, description="CUDA: limit on building one extension")
    trials: int = Field(default=3, ge=1, le=100, description="seeded correctness trials")
    seed: int = Field(default=0, description="seed of trial 0; trial k uses seed + k")
    alt_shape_trials: int = Field(default=1, ge=0, le=10, description="trials on the task's alt shapes")
    tolerances: dict[str, Tolerance] = Field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    allow_tf32: bool = Field(
        default=False, description="loosen fp32 tolerance to 1e-2 (Triton tl.dot uses TF32 by default)"
    )
    near_zero: float = Field(
        default=1e-3,
        ge=0,
        description="a reference output with max |value| below this is also compared at its own scale",
    )
    timeout_s: float = Field(default=60.0, gt=0, description="wall-clock limit per evaluation")
    host_memory_mb: int = Field(default=8192, ge=256, description="host memory limit of one evaluation's whole process tree")
    address_space_limit: bool = Field(
        default=True, description="CPU: also cap the address space (GPU: never; resident memory is watched)"
    )
    torch_ops: Literal["forbid", "penalize", "allow"] = Field(
        default="forbid", description="torch compute ops in ModelNew: fail, flag, or accept"
    )
    reject_hacks: list[HackFlag] = Field(
        default_factory=lambda: sorted(DEFAULT_REJECTED_HACKS, key=lambda h: h.value),
        description="hack flags that make the kernel incorrect",
    )
    timing: bool = Field(default=True, description="time candidate and reference (GPU only)")
    warmup: int = Field(default=5, ge=0, description="untimed calls before timing")
    repeats: int = Field(default=30, ge=3, description="timed calls (L2 flushed before each)")
    compile_baseline: bool = Field(default=True, description="also time torch.compile(reference)")
    trim_fraction: float = Field(default=0.1, ge=0, lt=0.5, description="each tail cut by the trimmed mean")
    excessive_speedup: float = Field(default=10.0, gt=1, description="speedup vs eager that raises a flag")
    profile: bool = Field(default=True, description="profiling ratio and kernel names (GPU only)")
    isolation: Literal["os", "audit"] = Field(
        default="os",
        description="'os': every child in the OS jail (namespaces, unprivileged uid, seccomp, Landlock, cgroup; "
                    "an evaluator that cannot build it refuses to run); 'audit': only the in-process audit hook, "
                    "NOT a security boundary (trusted code, or machines without user namespaces)",
    )
    max_processes: int = Field(default=256, ge=16, description="processes and threads of one evaluation's tree")
    tmp_size_mb: int = Field(default=1024, ge=16, description="size of the private writable /tmp of one evaluation")
    max_error_chars: int = Field(default=2000, ge=200, description="trimmed error text kept in the result")

    @field_validator("tolerances")
    @classmethod
    def _known_dtypes(cls, tolerances: dict[str, Tolerance]) -> dict[str, Tolerance]:
        merged = dict(DEFAULT_TOLERANCES)
        merged.update(tolerances)
        return merged

    def tolerance_for(self, dtype: str) -> Tolerance:
        """Tolerance for a torch dtype name (``float32``); integer and bool dtypes compare exactly."""
        if dtype == "float32" and self.allow_tf32:
            return Tolerance(atol=1e-2, rtol=1e-2)
        return self.tolerances.get(dtype, Tolerance(atol=0.0, rtol=0.0))


def loosened_for(task: Any, options: EvalOptions) -> EvalOptions:
    """``options`` with the task's own tolerances (``Task.tolerance``) where they are looser."""
    wider = {dtype: Tolerance(atol=tol, rtol=tol) for dtype, tol in getattr(task, "tolerance", {}).items()
             if dtype not in options.tolerances or tol > max(options.tolerances[dtype].atol,
                                                               options.tolerances[dtype].rtol)}
    return options.model_copy(update={"tolerances": {**options.tolerances, **wider}}) if wider else options


class HackFinding(StrictModel):
    """One suspected hack with the evidence."""

    flag: HackFlag
    message: str
    rejected: bool = Field(description="whether this flag made the kernel incorrect")


class TrialResult(StrictModel):
    """Correctness of one seeded trial (all outputs of the forward)."""

    seed: int
    shapes: Literal["primary", "alternate", "signed"] = "primary"
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch: str | None = Field(default=None, description="why it failed, if it did")


class RuntimeStats(StrictModel):
    """Summary of timed calls, in milliseconds."""

    median_ms: float
    spread_ms: float = Field(description="interquartile range")
    trimmed_mean_ms: float
    min_ms: float
    samples: int


class EvalResult(StrictModel):
    """The verdict on one candidate. Built by the evaluator from raw data, never by candidate code."""

    task: str
    device: str = Field(description="'cpu (triton interpreter)' or the GPU name")
    compiled: bool
    correct: bool
    fault: FaultClass
    error: str | None = Field(default=None, description="trimmed error text / trace for feedback")
    trials: list[TrialResult] = Field(default_factory=list)
    hacks: list[HackFinding] = Field(default_factory=list)
    timing_available: bool = False
    timing_note: str | None = Field(default=None, description="why timing is missing, when it is")
    correctness_note: str | None = Field(
        default=None, description="why correctness was not checked although the candidate built (CUDA on CPU)"
    )
    runtime: RuntimeStats | None = None
    reference_runtime: RuntimeStats | None = None
    compiled_reference_runtime: RuntimeStats | None = None
    speedup: float | None = Field(default=None, description="reference eager median / candidate median")
    speedup_std: float | None = Field(default=None, description="one-sigma uncertainty of the speedup")
    speedup_vs_compile: float | None = None
    profiling_ratio: float | None = Field(
        default=None, description="device time in the candidate's Triton kernels / all device time"
    )
    kernel_launches: int | None = Field(default=None, description="Triton launches seen in one forward")
    sandbox_notes: list[str] = Field(default_factory=list)
    wall_time_s: float = 0.0
    phase_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="wall time per phase of the candidate's process (setup, import, correctness, profile, "
        "timing, teardown); diagnostic",
    )

    @property
    def hack_flags(self) -> list[HackFlag]:
        """The flags alone."""
        return [h.flag for h in self.hacks]


def is_fast(correct: bool, speedup: float | None, p: float) -> bool:
    """KernelBench's fast_p test of one sample: correct and more than ``p`` times faster than the
    baseline. ``p = 0`` is correctness alone (every correct kernel has a positive speedup,
    measured or not). The one definition the eval app's report and the training metrics use."""
    if not correct:
        return False
    return p <= 0 or (speedup is not None and speedup > p)
