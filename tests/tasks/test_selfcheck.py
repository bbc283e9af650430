"""check_solution catches wrong solutions and reports why."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from forge_kernels.tasks.loaders import load_builtin_tasks
from forge_kernels.tasks.selfcheck import check_solution, default_tolerance

RELU = load_builtin_tasks(names=["level1/relu"])[0]
SOFTMAX = load_builtin_tasks(names=["level1/softmax"])[0]
MATMUL = load_builtin_tasks(names=["level1/matmul"])[0]


def test_a_wrong_kernel_fails_with_a_value_mismatch(interpreter: None) -> None:
    wrong = RELU.model_copy(update={"solution": RELU.solution.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.1)")})
    result = check_solution(wrong)
    assert not result.passed
    assert "values differ" in result.error
    assert result.max_abs_diff == pytest.approx(0.1, abs=1e-6)


def test_a_solution_ignoring_masks_on_the_tail_fails_on_the_alternate_shapes(interpreter: None) -> None:
    # A hard-coded row length passes the primary shapes (1000 columns) but not the alternate ones.
    hard_coded = SOFTMAX.solution.replace("n_cols, x2d.stride(0)", "1000, x2d.stride(0)")
    task = SOFTMAX.model_copy(update={"solution": hard_coded})
    assert check_solution(task).passed
    assert not check_solution(task, alternate=True).passed


def test_wrong_output_shape_is_reported(interpreter: None) -> None:
    bad = RELU.solution.replace("        return out\n", "        return out[:, :-1]\n")
    result = check_solution(RELU.model_copy(update={"solution": bad}))
    assert not result.passed and "shape" in result.error


def test_an_exception_in_the_solution_is_a_failed_result_with_its_traceback(interpreter: None) -> None:
    bad = RELU.solution.replace("        x = x.contiguous()\n", "        raise RuntimeError('boom')\n")
    result = check_solution(RELU.model_copy(update={"solution": bad}))
    assert not result.passed
    assert "RuntimeError: boom" in result.error


def test_cpu_check_without_the_interpreter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        check_solution(RELU)


def test_task_without_solution_is_refused(interpreter: None) -> None:
    with pytest.raises(ValueError, match="no reference solution"):
        check_solution(RELU.model_copy(update={"solution": None}))


def test_matmul_tasks_get_the_looser_tolerance() -> None:
    assert default_tolerance(MATMUL.model_copy(update={"tolerance": {}})) == 1e-3  # any matmul-tagged task
    assert default_tolerance(MATMUL) == 2e-3  # the task's own, looser bound (4096-deep sums on a GPU)
    assert default_tolerance(RELU) == 1e-4


def test_cli_prints_one_json_line_per_check_and_exit_status() -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("TRITON_INTERPRET", None)  # the CLI switches the interpreter on itself for --device cpu
    proc = subprocess.run(
        [sys.executable, "-m", "forge_kernels.tasks.selfcheck", "--names", "level1/relu", "level1/add"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["name"], r["alternate"], r["passed"]) for r in results] == [
        ("level1/add", False, True), ("level1/add", True, True),
        ("level1/relu", False, True), ("level1/relu", True, True),
    ]
