"""Every fault class is produced by a test kernel and classified; the evaluator keeps working."""

from __future__ import annotations

import os
import signal

from pathlib import Path

import pytest
import torch

from forge_kernels.eval import EvalOptions, Evaluator, FaultClass
from forge_kernels.tasks.task import Task


def kernel(name: str) -> str:
    return (Path(__file__).parent / "kernels" / f"{name}.py").read_text()


def test_correct_kernel_passes(evaluator, tasks):
    r = evaluator.evaluate(tasks["relu"], kernel("relu_ok"))
    assert r.fault is FaultClass.NONE, r.error
    assert r.correct and r.compiled
    assert [t.shapes for t in r.trials].count("primary") == 2 and all(t.passed for t in r.trials)
    assert r.kernel_launches == 1 and r.hacks == []
    assert not r.timing_available and "unavailable on CPU" in (r.timing_note or "")
    assert r.runtime is None and r.speedup is None and r.profiling_ratio is None
    assert list(r.phase_seconds)[:4] == ["setup", "import", "first_forward", "correctness"]
    assert all(v >= 0 for v in r.phase_seconds.values())


def test_complete_reports_do_not_leak_exit_bookkeeping(evaluator, tasks):
    # The evaluator returns on the child's final frame without waiting for its exit; the zygote
    # client must then drop the late exit message instead of keeping a future per evaluation.
    for _ in range(4):
        assert evaluator.evaluate(tasks["relu"], kernel("relu_ok")).correct
    zygote = evaluator.zygote("cpu")
    assert len(zygote._exits) + len(zygote._forgotten) <= 2


@pytest.mark.parametrize(
    ("name", "fault", "compiled", "text"),
    [
        ("syntax_error", FaultClass.SYNTAX_ERROR, False, "line"),
        ("import_error", FaultClass.IMPORT_ERROR, False, "not_a_real_module_for_kernels"),
        ("triton_compile_error", FaultClass.TRITON_COMPILE_ERROR, False, "no_such_function"),
        ("missing_model_new", FaultClass.MISSING_MODEL_NEW, False, "ModelNew"),
        ("init_error", FaultClass.INIT_ERROR, True, "blocks"),
        ("runtime_error", FaultClass.RUNTIME_ERROR, True, "ZeroDivisionError"),
        ("shape_mismatch", FaultClass.OUTPUT_SHAPE_MISMATCH, True, "shape"),
        ("dtype_mismatch", FaultClass.OUTPUT_DTYPE_MISMATCH, True, "float64"),
        ("value_mismatch", FaultClass.OUTPUT_VALUE_MISMATCH, True, "atol"),
        ("nan_output", FaultClass.OUTPUT_NAN, True, "NaN"),
        ("sandbox_write", FaultClass.SANDBOX_VIOLATION, True, "forge_kernels_leak"),
        ("sandbox_socket", FaultClass.SANDBOX_VIOLATION, False, "socket"),
        ("hack_decoy", FaultClass.DECOY_KERNEL, True, "launches none"),
    ],
)
def test_fault_classified(evaluator, tasks, name, fault, compiled, text):
    r = evaluator.evaluate(tasks["relu"], kernel(name))
    assert r.fault is fault, (r.fault, r.error)
    assert not r.correct
    assert r.compiled is compiled
    assert text in (r.error or ""), r.error
    assert not os.path.exists(os.path.join(os.path.dirname(torch.__file__), "forge_kernels_leak.pt"))


@pytest.mark.parametrize(
    ("name", "fault", "text"),
    [
        ("segfault", FaultClass.SEGFAULT_ABORT, "SIGSEGV"),
        ("abort", FaultClass.SEGFAULT_ABORT, "SIGABRT"),
        ("exit_early", FaultClass.SEGFAULT_ABORT, "before finishing"),
        ("host_oom", FaultClass.HOST_OOM, "allocate"),
    ],
)
def test_crashes_then_recovers(evaluator, tasks, name, fault, text):
    r = evaluator.evaluate(tasks["relu"], kernel(name))
    assert r.fault is fault, (r.fault, r.error)
    assert text in (r.error or "")
    after = evaluator.evaluate(tasks["relu"], kernel("relu_ok"))
    assert after.correct, after.error


def test_timeout_then_recovers(evaluator, tasks):
    r = evaluator.evaluate(tasks["relu"], kernel("timeout"), evaluator.options.model_copy(update={"timeout_s": 2.0}))
    assert r.fault is FaultClass.TIMEOUT and not r.correct
    assert 2.0 <= r.wall_time_s < 10
    assert evaluator.evaluate(tasks["relu"], kernel("relu_ok")).correct


def test_host_memory_watch_kills_resident_growth(tasks):
    """On a GPU there is no address-space limit (CUDA reserves huge ranges): the RSS watch bounds it."""
    code = kernel("relu_ok").replace(
        "        out = torch.empty_like(x)\n",
        "        hog = torch.ones(1 << 29)  # 2 GiB, touched\n        out = torch.empty_like(x)\n",
    )
    options = EvalOptions(device="cpu", trials=1, host_memory_mb=400, timeout_s=30, torch_ops="allow",
                          address_space_limit=False)
    with Evaluator(options) as ev:
        r = ev.evaluate(tasks["relu"], code)
    assert r.fault is FaultClass.HOST_OOM, (r.fault, r.error)
    assert "400 MiB" in (r.error or "")  # the cgroup's kill, or the runner's resident-memory watch


def test_zygote_replaced_after_it_dies(evaluator, tasks):
    zygote = evaluator.zygote("cpu")
    old_pid, generation = zygote.pid, zygote.generation
    os.kill(old_pid, signal.SIGKILL)
    r = evaluator.evaluate(tasks["relu"], kernel("relu_ok"))
    assert r.correct, r.error
    assert zygote.pid != old_pid and zygote.generation == generation + 1


def test_task_bug_is_internal_error_not_candidate_fault(evaluator):
    broken = Task(name="test/broken", level=1, source=(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.no_such_method()\n"
        "def get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n"))
    r = evaluator.evaluate(broken, kernel("relu_ok"))
    assert r.fault is FaultClass.INTERNAL_ERROR and "reference failed" in (r.error or "")
    assert not r.compiled


def test_async_evaluate(evaluator, tasks):
    import asyncio

    async def two():
        return await asyncio.gather(evaluator.aevaluate(tasks["relu"], kernel("relu_ok")),
                                    evaluator.aevaluate(tasks["relu"], kernel("value_mismatch")))

    ok, bad = asyncio.run(two())
    assert ok.correct and bad.fault is FaultClass.OUTPUT_VALUE_MISMATCH


def test_write_from_cxx_blocked_by_read_only_mounts(evaluator, tasks):
    r = evaluator.evaluate(tasks["relu"], kernel("sandbox_cxx_write"))
    assert not r.correct and r.fault is FaultClass.RUNTIME_ERROR, (r.fault, r.error)
    assert any("read-only root" in note for note in r.sandbox_notes), r.sandbox_notes
    assert not os.path.exists(os.path.join(os.path.dirname(torch.__file__), "forge_kernels_leak.pt"))
