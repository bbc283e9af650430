"""Every built-in task's reference Triton solution matches its reference Model.

CPU: on the Triton interpreter, on the task's cpu shapes and its alternate cpu shapes.
GPU (``-m gpu``): on the realistic gpu shapes and the alternate gpu shapes.
"""

from __future__ import annotations

import pytest
import torch

from forge_kernels.tasks.loaders import builtin_task_names, load_builtin_tasks
from forge_kernels.tasks.selfcheck import check_solution

NAMES = builtin_task_names()


@pytest.mark.parametrize("alternate", [False, True], ids=["shapes", "alt_shapes"])
@pytest.mark.parametrize("name", NAMES)
def test_solution_matches_reference_on_interpreter(name: str, alternate: bool, interpreter: None) -> None:
    (task,) = load_builtin_tasks(names=[name])
    result = check_solution(task, device="cpu", alternate=alternate)
    assert result.passed, f"{name} ({'alt' if alternate else 'primary'} cpu shapes): {result.error}"


@pytest.mark.gpu
@pytest.mark.parametrize("alternate", [False, True], ids=["shapes", "alt_shapes"])
@pytest.mark.parametrize("name", NAMES)
def test_solution_matches_reference_on_gpu(name: str, alternate: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile for the GPU, not interpret
    (task,) = load_builtin_tasks(names=[name])
    result = check_solution(task, device="cuda", alternate=alternate)
    assert result.passed, f"{name} ({'alt' if alternate else 'primary'} gpu shapes): {result.error}"
