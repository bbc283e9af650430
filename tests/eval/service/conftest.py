"""Fixtures for the eval-service tests: one real server subprocess on loopback shared by the
session (two CPU workers), the built-in relu task, and a coroutine runner. Candidate kernels come
from tests/eval/kernels/."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import httpx
import pytest

from forge_kernels.eval.service import LocalEvalServer
from forge_kernels.tasks import load_builtin_tasks
from forge_kernels.tasks.task import Task

# Small limits, so 413/429 are cheap to reach; a short service deadline, so a hung zygote is
# noticed in seconds (evaluations of the tiny relu task take ~0.3 s).
SERVER_SETTINGS: dict[str, Any] = dict(queue_limit=48, max_batch=64, max_code_bytes=64_000, eval_deadline_s=12.0)


@pytest.fixture(scope="session")
def relu() -> Task:
    return load_builtin_tasks(names=["level1/relu"])[0]


@pytest.fixture(scope="session")
def server():
    with LocalEvalServer(devices="cpu", workers=2, **SERVER_SETTINGS) as srv:
        yield srv


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="session")
def run():
    """``run(coro)``: run a coroutine to completion on a fresh loop, failing instead of hanging."""

    def _run(coro: Coroutine[Any, Any, Any], timeout: float = 240.0) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return _run

