"""GPU paths: device-only fault classes, timing, profiling ratio, profiler decoy check, side streams.

Run on a CUDA machine with ``make test-gpu``; skipped where CUDA is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from forge_kernels.eval import EvalOptions, Evaluator, FaultClass, HackFlag
from forge_kernels.tasks.task import Task

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SLOW_RELU = '''
import torch
import torch.nn as nn

N = 1 << 22


class Model(nn.Module):
    def forward(self, x):
        y = x
        for _ in range(50):
            y = torch.relu(x)  # fifty passes over memory for one ReLU
        return y


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def kernel(name: str) -> str:
    return (Path(__file__).parent / "kernels" / f"{name}.py").read_text()


def flags(result) -> set[HackFlag]:
    return {h.flag for h in result.hacks}


@pytest.fixture(scope="module")
def gpu_evaluator():
    ev = Evaluator(EvalOptions(device="cuda", trials=3, timeout_s=120, repeats=20, warmup=3))
    yield ev
    ev.close()


def test_correct_kernel_timed_and_profiled(gpu_evaluator, tasks):
    r = gpu_evaluator.evaluate(tasks["relu"], kernel("relu_ok"))
    assert r.correct, (r.fault, r.error, r.hacks)
    assert r.timing_available and r.timing_note is None
    assert r.runtime is not None and r.runtime.samples == 20 and r.runtime.median_ms > 0
    assert r.reference_runtime is not None and r.speedup is not None and r.speedup_std is not None
    assert r.compiled_reference_runtime is not None and r.speedup_vs_compile is not None
    assert r.profiling_ratio is not None and r.profiling_ratio > 0.5
    assert "cpu" not in r.device.lower()


@pytest.mark.parametrize(
    ("task", "name", "fault"),
    [
        ("relu", "gpu_illegal_access", FaultClass.ILLEGAL_MEMORY_ACCESS),
        ("relu", "gpu_oom", FaultClass.GPU_OOM),
        ("matmul", "gpu_shared_memory", FaultClass.SHARED_MEMORY_EXCEEDED),
    ],
)
def test_gpu_faults_then_recovery(gpu_evaluator, tasks, task, name, fault):
    r = gpu_evaluator.evaluate(tasks[task], kernel(name))
    assert r.fault is fault, (r.fault, r.error)
    assert not r.correct
    assert gpu_evaluator.evaluate(tasks["relu"], kernel("relu_ok")).correct


def test_profiler_sees_no_candidate_kernel_for_decoy(gpu_evaluator, tasks):
    r = gpu_evaluator.evaluate(tasks["relu"], kernel("hack_decoy"))
    assert r.fault is FaultClass.DECOY_KERNEL and not r.correct


def test_side_stream_launch_detected_at_runtime(gpu_evaluator, tasks):
    r = gpu_evaluator.evaluate(tasks["relu"], kernel("hack_side_stream"))
    side = [h for h in r.hacks if h.flag is HackFlag.SIDE_STREAM]
    assert side and "launches on stream" in side[0].message, r.hacks
    assert not r.correct


def test_timer_patch_ineffective_and_caught(gpu_evaluator, tasks):
    r = gpu_evaluator.evaluate(tasks["relu"], kernel("hack_timer_patch"))
    assert HackFlag.TIMER_PATCH in flags(r) and not r.correct


def test_excessive_speedup_flagged(gpu_evaluator):
    task = Task(name="test/slow_relu", level=1, source=SLOW_RELU)
    r = gpu_evaluator.evaluate(task, kernel("relu_ok"), gpu_evaluator.options.model_copy(
        update={"excessive_speedup": 5.0}))
    assert r.correct and r.speedup is not None and r.speedup > 5.0
    assert HackFlag.EXCESSIVE_SPEEDUP in flags(r)


def test_persisting_l2_flagged(gpu_evaluator, tasks):
    r = gpu_evaluator.evaluate(tasks["relu"], kernel("hack_persisting_l2"))
    assert HackFlag.PERSISTING_L2 in flags(r) and not r.correct


def test_l2_persisting_limit_readable():
    from forge_kernels.eval.timing import l2_persisting_limit

    torch.cuda.init()
    limit = l2_persisting_limit()
    assert limit is None or limit >= 0


@pytest.mark.parametrize("task", ["vector_add", "row_softmax", "matmul"])
def test_gpu_correct_kernels(gpu_evaluator, tasks, task):
    options = gpu_evaluator.options.model_copy(update={"allow_tf32": task == "matmul", "compile_baseline": False})
    r = gpu_evaluator.evaluate(tasks[task], kernel(f"{task}_ok"), options)
    assert r.correct, (r.fault, r.error, r.hacks)
    assert r.timing_available and r.profiling_ratio is not None
