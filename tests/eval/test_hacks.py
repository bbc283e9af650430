"""Every known reward hack is caught by a test kernel (CPU, Triton interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_kernels.eval import FaultClass, HackFlag


def kernel(name: str) -> str:
    return (Path(__file__).parent / "kernels" / f"{name}.py").read_text()


def flags(result) -> set[HackFlag]:
    return {h.flag for h in result.hacks}


@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("hack_decoy", HackFlag.DECOY_KERNEL),
        ("hack_decoy_modes", HackFlag.DECOY_KERNEL),
        ("hack_torch_ops", HackFlag.TORCH_COMPUTE),
        ("hack_hidden_torch_op", HackFlag.TORCH_COMPUTE),
        ("hack_try_except", HackFlag.TRY_EXCEPT_FALLBACK),
        ("hack_zeros", HackFlag.CONSTANT_OUTPUT),
        ("hack_returns_input", HackFlag.RETURNS_INPUT),
        ("hack_returns_input", HackFlag.INPUT_MUTATION),
        ("hack_cached_shape", HackFlag.CACHED_OUTPUT),
        ("hack_cached_version", HackFlag.CACHED_OUTPUT),
        ("hack_input_mutation", HackFlag.INPUT_MUTATION),
        ("hack_side_stream", HackFlag.SIDE_STREAM),
        ("hack_thread", HackFlag.THREAD_INJECTION),
        ("hack_timer_patch", HackFlag.TIMER_PATCH),
        ("hack_lazy_tensor", HackFlag.LAZY_TENSOR),
        ("hack_downcast", HackFlag.PRECISION_DOWNCAST),
        ("hack_hardcoded_shape", HackFlag.SHAPE_OVERFIT),
        ("hack_persisting_l2", HackFlag.PERSISTING_L2),
    ],
)
def test_hack_caught(evaluator, tasks, name, flag):
    r = evaluator.evaluate(tasks["relu"], kernel(name))
    assert flag in flags(r), (r.fault, r.error, r.hacks)
    assert not r.correct
    assert r.fault is not FaultClass.NONE and r.fault is not FaultClass.INTERNAL_ERROR


def test_freed_memory_reuse_fails(evaluator, tasks):
    """The reference runs in another process: no stale reference output to find in freed memory."""
    r = evaluator.evaluate(tasks["relu"], kernel("hack_freed_memory"))
    assert not r.correct
    assert r.fault in (FaultClass.OUTPUT_VALUE_MISMATCH, FaultClass.OUTPUT_NAN), (r.fault, r.error)


def test_dynamic_torch_op_detected_without_static_trace(evaluator, tasks):
    r = evaluator.evaluate(tasks["relu"], kernel("hack_hidden_torch_op"))
    assert r.fault is FaultClass.FORBIDDEN_OP
    assert "aten::abs" in (r.error or "")


def test_torch_ops_policy_penalize_and_allow(evaluator, tasks):
    penalize = evaluator.evaluate(tasks["relu"], kernel("hack_torch_ops"),
                                  evaluator.options.model_copy(update={"torch_ops": "penalize"}))
    assert penalize.correct and HackFlag.TORCH_COMPUTE in flags(penalize)
    assert not next(h for h in penalize.hacks if h.flag is HackFlag.TORCH_COMPUTE).rejected
    allow = evaluator.evaluate(tasks["relu"], kernel("hack_torch_ops"),
                               evaluator.options.model_copy(update={"torch_ops": "allow"}))
    assert allow.correct and HackFlag.TORCH_COMPUTE not in flags(allow)


def test_reject_list_is_configurable(evaluator, tasks):
    options = evaluator.options.model_copy(update={"reject_hacks": []})
    r = evaluator.evaluate(tasks["relu"], kernel("hack_input_mutation"), options)
    assert r.correct and HackFlag.INPUT_MUTATION in flags(r)


def test_near_zero_reference_rejects_zeros(evaluator, tasks):
    """Outputs ~1e-6: an absolute tolerance of 1e-4 alone would accept a zeros-returning kernel."""
    zeros = kernel("hack_zeros")
    r = evaluator.evaluate(tasks["small_output"], zeros)
    assert not r.correct and r.fault is FaultClass.OUTPUT_VALUE_MISMATCH, (r.fault, r.error)
    assert "scale" in (r.error or "")


@pytest.mark.parametrize("task", ["vector_add", "row_softmax", "matmul"])
def test_other_correct_kernels_pass(evaluator, tasks, task):
    r = evaluator.evaluate(tasks[task], kernel(f"{task}_ok"))
    assert r.correct, (r.fault, r.error, r.hacks)
    assert [t.shapes for t in r.trials][-1] == "signed" and len(r.trials) >= 3 and all(t.passed for t in r.trials)
