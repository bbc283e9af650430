"""Fixtures of the red-team corpus: the tasks its candidates attack, the secret and the canaries
that show a breach, and the evaluators (embedded and a real server on loopback)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_kernels.tasks.task import Task

CORPUS = Path(__file__).parent / "corpus"
SECRET = "FORGE_REDTEAM_SECRET"
SECRET_VALUE = "s3cret-value-no-candidate-may-see"
DEVICE = os.environ.get("FORGE_REDTEAM_DEVICE", "cpu")

_RELU = '''
import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.{draw}(N)]


def get_init_inputs():
    return []
'''
TASKS = {
    "relu": Task(name="redteam/relu", level=1, source=_RELU.format(draw="randn"), shapes={"cpu": {"N": 4096}},
                 alt_shapes={"cpu": {"N": 1500}, "gpu": {"N": (1 << 20) + 77}}),
    "relu_pos": Task(name="redteam/relu_pos", level=1, source=_RELU.format(draw="rand"), shapes={"cpu": {"N": 4096}}),
}


def header(path: Path) -> dict[str, str]:
    """The ``Key: value`` lines of a corpus file's docstring (Attack, Class, Expect, Task, ...)."""
    text = path.read_text().split('"""')[1]
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.strip().splitlines() if ":" in line)}


@pytest.fixture(scope="session")
def redteam_env() -> Iterator[None]:
    """The secret in this process's environment (and so the server's), and an abstract unix
    socket listening on the host: a candidate that reaches either has escaped."""
    os.environ[SECRET] = SECRET_VALUE
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0forge-redteam-listener")
    listener.listen(8)
    try:
        yield
    finally:
        listener.close()
        os.environ.pop(SECRET, None)
