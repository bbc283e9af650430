"""Fixtures for the CUDA environment tests: candidate modules from ``candidates/``, built-in tasks,
and one build cache per test session (nvcc is slow: candidates that share sources build once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_kernels.eval import EvalOptions, Evaluator
from forge_kernels.tasks.loaders import load_builtin_tasks
from forge_kernels.tasks.task import Task

CANDIDATES = Path(__file__).parent / "candidates"


@pytest.fixture(scope="session")
def candidate():
    """``candidate(name)``: the source of tests/eval/cuda/candidates/<name>.py."""
    return lambda name: (CANDIDATES / f"{name}.py").read_text()


@pytest.fixture(scope="session")
def builtin() -> dict[str, Task]:
    return {t.name: t for t in load_builtin_tasks(levels=(1,), names=["level1/relu", "level1/add", "level1/softmax"])}


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("cuda_builds"))


@pytest.fixture(scope="session")
def cpu_evaluator(build_dir: str):
    """CUDA candidates on this CPU machine: built with nvcc, not run."""
    ev = Evaluator(EvalOptions(device="cpu", language="cuda", compile_timeout_s=900), cuda_build_dir=build_dir)
    yield ev
    ev.close()
