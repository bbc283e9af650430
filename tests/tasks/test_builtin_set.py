"""Shape of the built-in set: coverage, registry consistency, solution hygiene."""

from __future__ import annotations

import ast
import math
from collections import Counter

import pytest

from forge_kernels.tasks.builtin.registry import BUILTIN_TASKS
from forge_kernels.tasks.loaders import load_builtin_tasks
from forge_kernels.tasks.source_check import module_globals
from forge_kernels.tasks.task import Task

TASKS = load_builtin_tasks()


def _module_constants(task: Task) -> dict[str, object]:
    tree = ast.parse(task.source)
    return {name: ast.literal_eval(node.value) for name, node in module_globals(tree).items()
            if node.value is not None and isinstance(node.value, ast.Constant)}


def test_at_least_thirty_tasks_over_three_levels() -> None:
    per_level = Counter(task.level for task in TASKS)
    assert len(TASKS) >= 30
    assert set(per_level) == {1, 2, 3}
    assert per_level[2] >= 5 and per_level[3] >= 4, per_level


def test_names_are_unique_and_prefixed_with_level() -> None:
    names = [task.name for task in TASKS]
    assert len(names) == len(set(names))
    assert all(task.name.startswith(f"level{task.level}/") for task in TASKS)


def test_covers_the_operator_families() -> None:
    tags = Counter(tag for task in TASKS for tag in task.tags)
    for family in ("elementwise", "activation", "reduction", "softmax", "norm", "matmul",
                   "fusion", "attention", "block", "scan"):
        assert tags[family] >= 1, f"no built-in task tagged {family!r}"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_task_has_all_four_shape_sets(task: Task) -> None:
    for table in (task.shapes, task.alt_shapes):
        assert set(table) == {"cpu", "gpu"}
        assert all(table[device] for device in ("cpu", "gpu"))
    assert task.shapes["cpu"] != task.alt_shapes["cpu"]
    assert task.shapes["gpu"] != task.alt_shapes["gpu"]


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_module_constants_are_the_gpu_shapes_and_cpu_shapes_are_smaller(task: Task) -> None:
    constants = _module_constants(task)
    for key, value in task.shapes["gpu"].items():
        assert constants[key] == value, f"{task.name}: module sets {key}={constants[key]}, registry gpu {value}"
    # Same keys in every set, and the interpreter's problem is much smaller than the GPU's.
    keys = set(task.shapes["gpu"])
    assert keys == set(task.shapes["cpu"]) == set(task.alt_shapes["cpu"]) == set(task.alt_shapes["gpu"])
    cpu_size = math.prod(int(v) for v in task.shapes["cpu"].values())
    gpu_size = math.prod(int(v) for v in task.shapes["gpu"].values())
    assert cpu_size * 100 < gpu_size


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_solution_launches_triton_kernels_and_calls_no_torch_compute(task: Task) -> None:
    assert task.solution is not None
    tree = ast.parse(task.solution)
    jitted = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and any(ast.unparse(d) == "triton.jit" for d in node.decorator_list)]
    assert jitted, f"{task.name}: no @triton.jit kernel"
    # A launch is `kernel[grid](...)`: a call whose callee is a subscript of the kernel's name.
    launched = {ast.unparse(node.func.value) for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)}
    assert set(jitted) <= launched, f"{task.name}: kernels {set(jitted) - launched} are never launched"
    # No torch operator does the work: only allocation, layout and module construction.
    allowed = {"torch.empty", "torch.empty_like", "torch.ones", "torch.randn", "torch.device"}
    torch_calls = {ast.unparse(n.func) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and ast.unparse(n.func).startswith(("torch.", "F."))}
    assert torch_calls <= allowed, f"{task.name}: calls {torch_calls - allowed}"


def test_registry_entries_point_at_existing_files() -> None:
    assert {entry.name for entry in BUILTIN_TASKS} == {task.name for task in TASKS}
