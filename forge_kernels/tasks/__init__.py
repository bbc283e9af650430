"""Kernel tasks in KernelBench's format: the model, loaders and the built-in set.

    from forge_kernels.tasks import load_tasks
    tasks = load_tasks({"source": "builtin", "levels": [1, 2]})
"""

from forge_kernels.tasks.kernelbook import KernelBookExample, load_kernelbook
from forge_kernels.tasks.loaders import (
    BuiltinTasksConfig,
    KernelBenchTasksConfig,
    TaskSourceConfig,
    builtin_task_names,
    load_builtin_tasks,
    load_kernelbench_tasks,
    load_tasks,
)
from forge_kernels.tasks.source_check import TaskFormatError, apply_shape_overrides
from forge_kernels.tasks.task import DeviceClass, ShapeOverrides, Task

__all__ = [
    "BuiltinTasksConfig",
    "DeviceClass",
    "KernelBenchTasksConfig",
    "KernelBookExample",
    "ShapeOverrides",
    "Task",
    "TaskFormatError",
    "TaskSourceConfig",
    "apply_shape_overrides",
    "builtin_task_names",
    "load_builtin_tasks",
    "load_kernelbench_tasks",
    "load_kernelbook",
    "load_tasks",
]
