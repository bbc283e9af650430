"""Loading the built-in set and KernelBench checkouts, and the YAML-facing spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_kernels.config import StrictModel
from forge_kernels.tasks.loaders import (
    BuiltinTasksConfig,
    KernelBenchTasksConfig,
    TaskSourceConfig,
    load_builtin_tasks,
    load_kernelbench_tasks,
    load_tasks,
)
from forge_kernels.tasks.source_check import TaskFormatError

KB_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 64


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''


def _checkout(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_builtin_levels_and_names_filter() -> None:
    level3 = load_builtin_tasks(levels=[3])
    assert level3 and all(t.level == 3 for t in level3)
    (relu,) = load_builtin_tasks(names=["level1/relu"])
    assert relu.solution and "ModelNew" in relu.solution and relu.origin == "builtin"


def test_unknown_builtin_name_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown built-in task\(s\) \['level1/nope'\].*level1/relu"):
        load_builtin_tasks(names=["level1/nope"])


def test_kernelbench_checkout_loads_in_numeric_order(tmp_path: Path) -> None:
    root = _checkout(tmp_path, {
        "level1/10_Later.py": KB_TASK, "level1/2_Square_matrix_multiplication_.py": KB_TASK,
        "level1/__init__.py": "", "level2/1_Conv.py": KB_TASK, "level1/notes.txt": "ignored",
    })
    tasks = load_kernelbench_tasks(root, levels=[1, 2])
    assert [t.name for t in tasks] == ["level1/2_Square_matrix_multiplication_", "level1/10_Later", "level2/1_Conv"]
    assert tasks[0].level == 1 and tasks[2].level == 2
    assert tasks[0].origin == str(root / "level1" / "2_Square_matrix_multiplication_.py")
    assert tasks[0].solution is None and tasks[0].shapes == {}
    # KernelBench's protocol tolerance (atol = rtol = 1e-2 in fp32), applied loosen-only
    assert tasks[0].tolerance["float32"] == 1e-2


def test_kernelbench_tolerance_loosens_the_evaluators_fp32_bound(tmp_path: Path) -> None:
    from forge_kernels.eval.results import EvalOptions, loosened_for

    (task,) = load_kernelbench_tasks(_checkout(tmp_path, {"level2/14_Gemm_Sum.py": KB_TASK}), levels=[2])
    options = loosened_for(task, EvalOptions())
    assert options.tolerance_for("float32").atol == 1e-2 and options.tolerance_for("float32").rtol == 1e-2
    strict_builtin = EvalOptions().tolerance_for("float32")
    assert strict_builtin.atol == 1e-4  # built-in tasks keep the tight default


def test_kernelbench_repo_root_and_limit(tmp_path: Path) -> None:
    _checkout(tmp_path, {f"KernelBench/level1/{i}_T.py": KB_TASK for i in range(1, 5)})
    tasks = load_kernelbench_tasks(tmp_path, levels=[1], limit=2)
    assert [t.name for t in tasks] == ["level1/1_T", "level1/2_T"]


def test_kernelbench_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    root = _checkout(tmp_path, {"level1/1_Ok.py": KB_TASK,
                                "level1/2_Bad.py": KB_TASK.replace("return torch.matmul(A, B)", "return (")})
    with pytest.raises(TaskFormatError, match=r"2_Bad\.py: syntax error at line 10"):
        load_kernelbench_tasks(root, levels=[1])


def test_kernelbench_missing_get_init_inputs_is_named(tmp_path: Path) -> None:
    root = _checkout(tmp_path, {"level1/3_NoInit.py": KB_TASK.replace("def get_init_inputs", "def init")})
    with pytest.raises(TaskFormatError, match=r"3_NoInit\.py: reference module does not define get_init_inputs"):
        load_kernelbench_tasks(root, levels=[1])


def test_kernelbench_missing_level_folder_is_explained(tmp_path: Path) -> None:
    root = _checkout(tmp_path, {"level1/1_A.py": KB_TASK})
    with pytest.raises(TaskFormatError, match=r"level3: no such folder.*found \['level1'\]"):
        load_kernelbench_tasks(root, levels=[1, 3])
    with pytest.raises(TaskFormatError, match="is not a directory"):
        load_kernelbench_tasks(tmp_path / "absent")


def test_kernelbench_non_utf8_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Bin.py").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(TaskFormatError, match=r"1_Bin\.py: not UTF-8"):
        load_kernelbench_tasks(tmp_path, levels=[1])


def test_load_tasks_from_yaml_style_mappings(tmp_path: Path) -> None:
    root = _checkout(tmp_path, {"level1/1_A.py": KB_TASK})
    assert [t.level for t in load_tasks({"source": "builtin", "levels": [2]})] == [2] * len(load_builtin_tasks([2]))
    assert [t.name for t in load_tasks({"source": "kernelbench", "path": str(root), "levels": [1]})] == ["level1/1_A"]
    assert load_tasks(BuiltinTasksConfig(names=["level1/add"]))[0].name == "level1/add"


@pytest.mark.parametrize(("spec", "needle"), [
    ({"source": "huggingface"}, "does not match any of the expected tags: 'builtin', 'kernelbench'"),
    ({"source": "builtin", "levels": [5]}, r"builtin\.levels\.0\n  Input should be 1, 2 or 3"),
    ({"source": "builtin", "level": [1]}, r"builtin\.level\n  Extra inputs are not permitted"),
    ({"source": "kernelbench"}, r"kernelbench\.path\n  Field required"),
    ({"levels": [1]}, "Unable to extract tag using discriminator 'source'"),
])
def test_invalid_specs_name_the_problem(spec: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        load_tasks(spec)


def test_spec_embeds_in_an_app_config() -> None:
    class AppConfig(StrictModel):
        tasks: TaskSourceConfig = BuiltinTasksConfig()

    cfg = AppConfig.model_validate({"tasks": {"source": "kernelbench", "path": "/data/kb", "levels": [1]}})
    assert isinstance(cfg.tasks, KernelBenchTasksConfig) and cfg.tasks.path == Path("/data/kb")
    assert isinstance(AppConfig().tasks, BuiltinTasksConfig)
