"""Fixtures for the evaluator tests: small tasks, candidate kernels from tests/eval/kernels/, and one
shared Evaluator (its zygote is the point: forking it keeps this suite fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_kernels.eval import EvalOptions, Evaluator
from forge_kernels.tasks.task import Task

KERNELS = Path(__file__).parent / "kernels"

RELU = '''
import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

VECTOR_ADD = '''
import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
'''

ROW_SOFTMAX = '''
import torch
import torch.nn as nn

M = 4096
N = 1024


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
'''

MATMUL = '''
import torch
import torch.nn as nn

M = 2048
K = 2048
N = 2048


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''

SMALL_OUTPUT = '''
import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    def forward(self, x):
        return x * 1e-6


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def make_tasks() -> dict[str, Task]:
    return {
        "relu": Task(name="test/relu", level=1, source=RELU, shapes={"cpu": {"N": 1024}},
                     alt_shapes={"cpu": {"N": 1500}, "gpu": {"N": (1 << 20) + 77}}),
        "vector_add": Task(name="test/vector_add", level=1, source=VECTOR_ADD, shapes={"cpu": {"N": 1024}},
                           alt_shapes={"cpu": {"N": 777}, "gpu": {"N": 1000003}}),
        "row_softmax": Task(name="test/row_softmax", level=1, source=ROW_SOFTMAX,
                            shapes={"cpu": {"M": 4, "N": 128}}, alt_shapes={"cpu": {"M": 3, "N": 100},
                                                                          "gpu": {"M": 1000, "N": 1000}}),
        "matmul": Task(name="test/matmul", level=1, source=MATMUL, shapes={"cpu": {"M": 32, "K": 32, "N": 32}},
                       alt_shapes={"cpu": {"M": 16, "K": 32, "N": 48}}),
        "small_output": Task(name="test/small_output", level=1, source=SMALL_OUTPUT, shapes={"cpu": {"N": 1024}}),
    }


@pytest.fixture(scope="session")
def tasks() -> dict[str, Task]:
    return make_tasks()


@pytest.fixture(scope="session")
def evaluator():
    ev = Evaluator(EvalOptions(device="cpu", trials=2, timeout_s=30, host_memory_mb=2048))
    yield ev
    ev.close()


def kernel(name: str) -> str:
    """Source of tests/eval/kernels/<name>.py."""
    return (KERNELS / f"{name}.py").read_text()
