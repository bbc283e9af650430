"""Task loaders: the built-in set and a KernelBench checkout, selectable from YAML.

```yaml
tasks: {source: builtin, levels: [1, 2]}
tasks: {source: kernelbench, path: /data/KernelBench/KernelBench, levels: [1], limit: 20}
```

``load_tasks(spec)`` accepts such a mapping (or a :data:`TaskSourceConfig`) and returns
validated :class:`Task` objects; malformed files raise :class:`TaskFormatError` naming the file.
KernelBook-style SFT rows load through :mod:`forge_kernels.tasks.kernelbook`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from forge_kernels.config import StrictModel
from forge_kernels.tasks.builtin.registry import BUILTIN_TASKS, BuiltinEntry
from forge_kernels.tasks.source_check import (
    TaskFormatError,
    check_reference_source,
    check_solution_source,
    module_globals,
)
from forge_kernels.tasks.task import Task

__all__ = [
    "BuiltinTasksConfig",
    "KernelBenchTasksConfig",
    "TaskSourceConfig",
    "builtin_task_names",
    "load_builtin_tasks",
    "load_kernelbench_tasks",
    "load_tasks",
]

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
_LEVELS = (1, 2, 3, 4)


class BuiltinTasksConfig(StrictModel):
    """The tasks shipped with Forge Kernels (each with a reference Triton solution)."""

    source: Literal["builtin"] = "builtin"
    levels: list[Literal[1, 2, 3]] = Field(default_factory=lambda: [1, 2, 3])
    names: list[str] | None = Field(default=None, description="only these, e.g. ['level1/relu']")


class KernelBenchTasksConfig(StrictModel):
    """A KernelBench checkout: ``<path>/level1/*.py``, ``<path>/level2/*.py``, ..."""

    source: Literal["kernelbench"]
    path: Path
    levels: list[Literal[1, 2, 3, 4]] = Field(default_factory=lambda: [1, 2, 3])
    limit: int | None = Field(default=None, ge=1, description="at most this many per level")


TaskSourceConfig = Annotated[BuiltinTasksConfig | KernelBenchTasksConfig, Field(discriminator="source")]
_SPEC_ADAPTER: TypeAdapter[BuiltinTasksConfig | KernelBenchTasksConfig] = TypeAdapter(TaskSourceConfig)


def builtin_task_names() -> list[str]:
    """Names of all built-in tasks, in curriculum order."""
    return [entry.name for entry in BUILTIN_TASKS]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise TaskFormatError(f"{path}: file not found") from err
    except UnicodeDecodeError as err:
        raise TaskFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err


def _builtin_task(entry: BuiltinEntry) -> Task:
    ref_path = BUILTIN_DIR / f"level{entry.level}" / f"{entry.stem}.py"
    sol_path = BUILTIN_DIR / f"level{entry.level}" / f"{entry.stem}_solution.py"
    source, solution = _read(ref_path), _read(sol_path)
    tree = check_reference_source(source, str(ref_path))
    check_solution_source(solution, str(sol_path))
    known = set(module_globals(tree))
    for label, table in (("cpu", entry.cpu), ("alt_cpu", entry.alt_cpu),
                         ("gpu", entry.gpu), ("alt_gpu", entry.alt_gpu)):
        unknown = sorted(set(table) - known)
        if unknown:
            raise TaskFormatError(f"{ref_path}: registry {label} shapes name {unknown}, which the "
                                  f"module does not assign at top level (it assigns {sorted(known)})")
    return Task(
        name=entry.name,
        level=entry.level,
        source=source,
        solution=solution,
        shapes={"cpu": dict(entry.cpu), "gpu": dict(entry.gpu)},
        alt_shapes={"cpu": dict(entry.alt_cpu), "gpu": dict(entry.alt_gpu)},
        origin="builtin",
        tags=list(entry.tags),
        tolerance=dict(entry.tolerance),
    )


def load_builtin_tasks(levels: Sequence[int] = (1, 2, 3), names: Sequence[str] | None = None) -> list[Task]:
    """The built-in tasks of ``levels`` (optionally only ``names``), in curriculum order."""
    if names is not None:
        unknown = sorted(set(names) - set(builtin_task_names()))
        if unknown:
            raise ValueError(f"unknown built-in task(s) {unknown}; known: {builtin_task_names()}")
    return [
        _builtin_task(entry)
        for entry in BUILTIN_TASKS
        if entry.level in levels and (names is None or entry.name in names)
    ]


def _kernelbench_sort_key(path: Path) -> tuple[int, str]:
    match = re.match(r"(\d+)_", path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


# KernelBench's own protocol compares with atol = rtol = 1e-2 (its eval's default): at its sizes an
# exact fp32 kernel can differ from the fp32 reference by more than 1e-4 (long reductions summed in
# another order; even the fp32 reference misses the fp64 result there), so the evaluator's stricter
# built-in default would fail honest kernels. Loosen-only: EvalOptions tolerances that are looser win.
KERNELBENCH_TOLERANCE = {"float32": 1e-2, "float16": 1e-2, "bfloat16": 2e-2}


def load_kernelbench_tasks(path: str | Path, levels: Sequence[int] = (1, 2, 3),
                           limit: int | None = None) -> list[Task]:
    """Tasks from a KernelBench checkout's ``level<N>/`` folders (named ``level1/<file stem>``).

    ``path`` may be the folder holding ``level1/`` … or the repository root (whose ``KernelBench/``
    holds them). Files are ordered by their numeric prefix (``1_Square_matrix_multiplication_.py``).
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise TaskFormatError(f"{root}: KernelBench path is not a directory")
    if not any((root / f"level{n}").is_dir() for n in _LEVELS) and (root / "KernelBench").is_dir():
        root = root / "KernelBench"
    tasks: list[Task] = []
    for level in levels:
        level_dir = root / f"level{level}"
        if not level_dir.is_dir():
            present = sorted(p.name for p in root.iterdir() if p.is_dir())
            raise TaskFormatError(f"{level_dir}: no such folder; expected level<N>/ folders "
                                  f"of .py files in {root} (found {present})")
        files = sorted((p for p in level_dir.glob("*.py") if p.name != "__init__.py"),
                       key=_kernelbench_sort_key)
        if not files:
            raise TaskFormatError(f"{level_dir}: folder holds no .py task files")
        for file in files[:limit]:
            source = _read(file)
            check_reference_source(source, str(file))
            tasks.append(Task(name=f"level{level}/{file.stem}", level=level, source=source,
                              origin=str(file), tags=["kernelbench"], tolerance=dict(KERNELBENCH_TOLERANCE)))
    return tasks


def load_tasks(spec: BuiltinTasksConfig | KernelBenchTasksConfig | Mapping[str, Any]) -> list[Task]:
    """Load tasks from a config section such as ``{source: builtin, levels: [1, 2]}``."""
    if isinstance(spec, Mapping):
        try:
            spec = _SPEC_ADAPTER.validate_python(dict(spec))
        except ValidationError as err:
            raise ValueError(f"invalid tasks spec {dict(spec)!r}: {err}") from err
    if isinstance(spec, BuiltinTasksConfig):
        return load_builtin_tasks(spec.levels, spec.names)
    if isinstance(spec, KernelBenchTasksConfig):
        return load_kernelbench_tasks(spec.path, spec.levels, spec.limit)
    raise TypeError(f"tasks spec must be a mapping or a task source config, got {type(spec).__name__}")
