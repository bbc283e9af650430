"""What can go wrong with a candidate kernel: fault classes and reward-hack flags.

Every :class:`~forge_kernels.eval.results.EvalResult` carries exactly one :class:`FaultClass`
(``NONE`` when the candidate compiled, ran and matched the reference) and a list of
:class:`HackFlag` findings. ``INTERNAL_ERROR`` is reserved for evaluator bugs and is never blamed
on the candidate; rewards treat it as "no signal" rather than as a wrong answer.
"""

from __future__ import annotations

import enum
import signal

__all__ = ["FaultClass", "HackFlag", "DEFAULT_REJECTED_HACKS", "classify_exception", "signal_name"]


class FaultClass(str, enum.Enum):
    """The single outcome class of one evaluation."""

    NONE = "none"
    SYNTAX_ERROR = "syntax_error"
    IMPORT_ERROR = "import_error"
    TRITON_COMPILE_ERROR = "triton_compile_error"
    CUDA_COMPILE_ERROR = "cuda_compile_error"  # nvcc / host compiler / linker rejected a load_inline extension
    COMPILE_TIMEOUT = "compile_timeout"  # building the extension exceeded EvalOptions.compile_timeout_s
    MISSING_MODEL_NEW = "missing_model_new"
    INIT_ERROR = "init_error"
    RUNTIME_ERROR = "runtime_error"
    ILLEGAL_MEMORY_ACCESS = "illegal_memory_access"
    SEGFAULT_ABORT = "segfault_abort"
    GPU_OOM = "gpu_oom"
    HOST_OOM = "host_oom"
    SHARED_MEMORY_EXCEEDED = "shared_memory_exceeded"
    TIMEOUT = "timeout"
    OUTPUT_SHAPE_MISMATCH = "output_shape_mismatch"
    OUTPUT_DTYPE_MISMATCH = "output_dtype_mismatch"
    OUTPUT_VALUE_MISMATCH = "output_value_mismatch"
    OUTPUT_NAN = "output_nan"
    DECOY_KERNEL = "decoy_kernel"
    FORBIDDEN_OP = "forbidden_op"
    SANDBOX_VIOLATION = "sandbox_violation"
    REWARD_HACK = "reward_hack"
    INTERNAL_ERROR = "internal_error"

    @property
    def compiled(self) -> bool:
        """Whether a candidate with this fault got past parsing, import and kernel compilation."""
        return self not in _NOT_COMPILED


_NOT_COMPILED = {
    FaultClass.SYNTAX_ERROR,
    FaultClass.IMPORT_ERROR,
    FaultClass.TRITON_COMPILE_ERROR,
    FaultClass.CUDA_COMPILE_ERROR,
    FaultClass.COMPILE_TIMEOUT,
    FaultClass.MISSING_MODEL_NEW,
    FaultClass.INTERNAL_ERROR,
}


class HackFlag(str, enum.Enum):
    """A suspected reward hack; the rejected ones (see ``EvalOptions.reject_hacks``) fail the kernel."""

    DECOY_KERNEL = "decoy_kernel"  # kernel (Triton or CUDA) defined but not launched (in some mode)
    TORCH_COMPUTE = "torch_compute"  # torch ops doing the work outside the candidate's kernels
    TRY_EXCEPT_FALLBACK = "try_except_fallback"  # kernel launch wrapped in try/except
    RETURNS_INPUT = "returns_input"  # an output aliases an input's storage
    CONSTANT_OUTPUT = "constant_output"  # output constant (e.g. zeros) while the reference is not
    CACHED_OUTPUT = "cached_output"  # repeated calls skip the kernel / return stale results
    INPUT_MUTATION = "input_mutation"  # forward wrote into its inputs
    SIDE_STREAM = "side_stream"  # work launched on a stream other than the timed one
    THREAD_INJECTION = "thread_injection"  # Python threads started by the candidate
    TIMER_PATCH = "timer_patch"  # timing or harness primitives replaced
    LAZY_TENSOR = "lazy_tensor"  # output is not a plain materialised torch.Tensor
    PRECISION_DOWNCAST = "precision_downcast"  # computes in lower precision than the task
    SHAPE_OVERFIT = "shape_overfit"  # correct on the task shapes, wrong on alternate shapes
    PERSISTING_L2 = "persisting_l2"  # persisting-L2 access-policy windows / limits
    EXCESSIVE_SPEEDUP = "excessive_speedup"  # speedup beyond a plausible bound
    DEGENERATE_REFERENCE = "degenerate_reference"  # reference output identically zero: weak check
    DEGENERATE_INPUTS = "degenerate_inputs"  # correct on the task's inputs, wrong once their signs are flipped
    LESS_ACCURATE = "less_accurate"  # error vs a float64 reference far above the fp32 reference's own
    GLOBAL_STATE = "global_state"  # changed process-wide torch settings (TF32, matmul precision, dtype)


# Hacks that make a kernel incorrect by default (configurable per run).
DEFAULT_REJECTED_HACKS: frozenset[HackFlag] = frozenset(
    {
        HackFlag.DECOY_KERNEL,
        HackFlag.TRY_EXCEPT_FALLBACK,
        HackFlag.RETURNS_INPUT,
        HackFlag.CONSTANT_OUTPUT,
        HackFlag.CACHED_OUTPUT,
        HackFlag.INPUT_MUTATION,
        HackFlag.SIDE_STREAM,
        HackFlag.THREAD_INJECTION,
        HackFlag.TIMER_PATCH,
        HackFlag.LAZY_TENSOR,
        HackFlag.SHAPE_OVERFIT,
        HackFlag.PERSISTING_L2,
        HackFlag.DEGENERATE_INPUTS,
        HackFlag.LESS_ACCURATE,
        HackFlag.GLOBAL_STATE,
    }
)

_OOM_HOST_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "std::bad_alloc", "Cannot allocate memory")
_IMA_MARKERS = (
    "illegal memory access",
    "misaligned address",
    "an illegal instruction",
    "unspecified launch failure",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
)
_SMEM_MARKERS = ("out of resource: shared memory", "OutOfResources", "shared memory")


def classify_exception(stage: str, type_name: str, module: str, message: str, in_kernel: bool) -> FaultClass:
    """Map an exception raised in the candidate process to a fault class.

    ``stage`` is where it happened (``import``, ``init``, ``forward``); ``type_name``/``module``
    describe the exception's class and ``in_kernel`` says whether the innermost candidate frame
    lies inside a ``@triton.jit`` function (on the interpreter, errors there are what the
    compiler would have rejected).
    """
    if type_name == "SandboxViolation":
        return FaultClass.SANDBOX_VIOLATION
    if type_name in ("MemoryError",) or any(m in message for m in _OOM_HOST_MARKERS):
        return FaultClass.HOST_OOM
    if type_name == "OutOfMemoryError" or "CUDA out of memory" in message:
        return FaultClass.GPU_OOM
    if type_name == "OutOfResources" or (module.startswith("triton") and any(m in message for m in _SMEM_MARKERS)):
        return FaultClass.SHARED_MEMORY_EXCEEDED
    if any(m in message for m in _IMA_MARKERS):
        return FaultClass.ILLEGAL_MEMORY_ACCESS
    if stage == "import":
        if type_name in ("ImportError", "ModuleNotFoundError"):
            return FaultClass.IMPORT_ERROR
        if type_name in ("SyntaxError", "IndentationError", "TabError"):
            return FaultClass.SYNTAX_ERROR
        if module.startswith("triton"):
            return FaultClass.TRITON_COMPILE_ERROR
        return FaultClass.IMPORT_ERROR
    if stage == "init":
        return FaultClass.INIT_ERROR
    if module.startswith("triton.compiler") or type_name in ("CompilationError", "CompileTimeAssertionFailure"):
        return FaultClass.TRITON_COMPILE_ERROR
    if in_kernel:
        return FaultClass.TRITON_COMPILE_ERROR
    return FaultClass.RUNTIME_ERROR


def signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11, etc.; ``signal N`` for unknown numbers."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
