"""The built-in reference solutions pass the full isolated evaluator, not only the in-process self-check:
sandbox, launch audits, hack checks and (on a GPU) timing and profiling included.

A few tasks (one per level) run in the default suite; all of them with ``-m slow`` (CPU, ~40 s)
and ``-m gpu`` (compiled Triton on realistic shapes, timed).
"""

from __future__ import annotations

import pytest
import torch

from forge_kernels.eval import EvalOptions, Evaluator
from forge_kernels.tasks.loaders import builtin_task_names, load_builtin_tasks

ALL = builtin_task_names()
ONE_PER_LEVEL = ["level1/relu", "level2/linear_relu", "level3/mlp"]


@pytest.fixture(scope="module")
def cpu_evaluator():
    ev = Evaluator(EvalOptions(device="cpu", trials=2))
    yield ev
    ev.close()


def _check(ev: Evaluator, name: str, options: EvalOptions | None = None) -> None:
    (task,) = load_builtin_tasks(names=[name])
    assert task.solution is not None, name
    r = ev.evaluate(task, task.solution, options)
    assert r.correct, f"{name}: {r.fault.value}: {r.error} hacks={[h.message for h in r.hacks]}"
    assert not r.hacks, f"{name}: a reference solution raised hack flags: {[h.message for h in r.hacks]}"
    assert all(t.passed for t in r.trials) and any(t.shapes == "alternate" for t in r.trials)


@pytest.mark.parametrize("name", ONE_PER_LEVEL)
def test_solution_passes_isolated_evaluator(cpu_evaluator, name: str) -> None:
    _check(cpu_evaluator, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ALL if n not in ONE_PER_LEVEL])
def test_every_solution_passes_isolated_evaluator(cpu_evaluator, name: str) -> None:
    _check(cpu_evaluator, name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ALL)
def test_every_solution_passes_and_is_timed_on_gpu(name: str, gpu_solution_evaluator: Evaluator) -> None:
    (task,) = load_builtin_tasks(names=[name])
    # tl.dot computes in TF32 by default, so solutions using it get the TF32 tolerance for fp32.
    options = gpu_solution_evaluator.options.model_copy(update={"allow_tf32": "tl.dot" in task.solution})
    r = gpu_solution_evaluator.evaluate(task, task.solution, options)
    assert r.correct, f"{name}: {r.fault.value}: {r.error} hacks={[h.message for h in r.hacks]}"
    assert r.timing_available and r.speedup is not None and r.speedup > 0
    assert r.profiling_ratio is not None and r.profiling_ratio > 0
    print(f"{name}: speedup {r.speedup:.2f} ± {r.speedup_std:.2f}, PR {r.profiling_ratio:.2f}")


@pytest.fixture(scope="module")
def gpu_solution_evaluator():
    ev = Evaluator(EvalOptions(device="cuda", trials=2, repeats=10, warmup=2, compile_baseline=False,
                               timeout_s=180))
    yield ev
    ev.close()
