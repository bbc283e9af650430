"""Shared fixtures for runtime tests: one event loop for the session, the backend parameter,
and the test actors (defined here so monarch processes can import them by module name)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from forge_kernels.config import StrictModel
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.runtime import Actor, endpoint, shutdown

CALL_TIMEOUT_S = 60  # no test may hang: every coroutine runs under this limit


class Counter(Actor):
    """State, ordering, errors, copies, crashes and metrics: everything the tests poke at."""

    class Config(StrictModel):
        start: int = 0

    async def setup(self) -> None:
        self.value = self.config.start
        self.uid = uuid.uuid4().hex[:8]
        self.log: list[Any] = []
        self.stored: torch.Tensor | None = None

    @endpoint
    async def add(self, x: int) -> int:
        self.value += x
        return self.value

    @endpoint
    async def get(self) -> int:
        return self.value

    @endpoint
    async def visible_devices(self) -> str | None:
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    @endpoint
    async def whoami(self) -> dict[str, Any]:
        return {"uid": self.uid, "pid": os.getpid(), "rank": self.rank, "size": self.size}

    @endpoint
    async def slow_append(self, item: Any, delay: float) -> list[Any]:
        """Appends ``("start", item)``, sleeps, appends ``("end", item)``: overlap would show."""
        self.log.append(("start", item))
        await asyncio.sleep(delay)
        self.log.append(("end", item))
        return list(self.log)

    @endpoint
    async def work(self, request_id: int, delay: float, die_on: tuple[int, str, bool] | None = None
                   ) -> tuple[int, str]:
        """Answers ``(request_id, uid)``; dies mid-request if ``die_on == (request_id, uid, hard)``."""
        await asyncio.sleep(delay)
        if die_on is not None and die_on[:2] == (request_id, self.uid):
            await self.crash(die_on[2])
        return request_id, self.uid

    @endpoint
    async def fail(self, message: str) -> None:
        raise ValueError(message)

    @endpoint
    async def scale_in_place(self, t: torch.Tensor, factor: float) -> torch.Tensor:
        t.mul_(factor)
        self.stored = t
        return t

    @endpoint
    async def stored_sum(self) -> float:
        assert self.stored is not None
        return float(self.stored.sum())

    @endpoint
    async def crash(self, hard: bool) -> None:
        """Die: ``os._exit`` when this actor has its own process, else ``sys.exit``."""
        if hard:
            os._exit(3)
        sys.exit(3)

    @endpoint
    async def record(self, values: list[float]) -> None:
        for v in values:
            record_metric("test/mean", v, Reduce.MEAN)
            record_metric("test/sum", v, Reduce.SUM)
            record_metric("test/std", v, Reduce.STD)
            record_metric("test/max", v, Reduce.MAX)


@pytest.fixture(scope="session")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(shutdown())
    loop.close()


@pytest.fixture(scope="session")
def run(loop):
    """``run(coro)``: run a coroutine on the shared loop, failing instead of hanging."""

    def _run(coro: Coroutine[Any, Any, Any], timeout: float = CALL_TIMEOUT_S) -> Any:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))

    return _run


@pytest.fixture(params=["local", "monarch"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def actors() -> SimpleNamespace:
    return SimpleNamespace(Counter=Counter)


@pytest.fixture
def hard_crash(backend) -> bool:
    """Monarch actors really exit their process; local ones raise SystemExit."""
    return backend == "monarch"


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.02) -> None:
    """Poll a synchronous condition (outside the loop)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
