"""Store test fixtures: one event loop for the session, a fresh store per test on each backend,
and the actors of the cross-process torchstore test (defined here so monarch processes can
import them by module name)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from collections.abc import Coroutine
from typing import Any

import pytest
import torch

from forge_kernels.runtime import Actor, endpoint
from forge_kernels.store import ShmTensorStore, StoreConfig, TensorStore, build_store

CALL_TIMEOUT_S = 120  # no test may hang


@pytest.fixture
def sample_state_dict():
    """``sample_state_dict(seed)``: tensors of every kind a checkpoint holds (dtypes, empty, scalar,
    non-contiguous)."""

    def make(seed: int = 0) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {
            "embed.weight": torch.randn(33, 17, generator=g),
            "layer.bias": torch.randn(5, generator=g).to(torch.bfloat16),
            "layer.ids": torch.arange(7, dtype=torch.int64),
            "mask": torch.tensor([True, False, True]),
            "empty": torch.empty(0, 4),
            "scalar": torch.tensor(3.5, dtype=torch.float16),
            "strided": torch.randn(6, 4, generator=g).t(),  # non-contiguous source
        }

    return make


@pytest.fixture(scope="session")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def run(loop):
    """``run(coro)``: run a coroutine on the session's loop, failing instead of hanging."""

    def _run(coro: Coroutine[Any, Any, Any], timeout: float = CALL_TIMEOUT_S) -> Any:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))

    return _run


@pytest.fixture(scope="session")
def volume_mesh(run):
    """One monarch process that hosts the storage volume of every torchstore test store
    (a store per test, without paying a process start per test)."""
    from monarch.actor import this_host

    mesh = this_host().spawn_procs(per_host={"procs": 1})
    yield mesh
    run(mesh.stop())


@pytest.fixture(params=["shm", "torchstore"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_config(backend, tmp_path) -> StoreConfig:
    return StoreConfig(backend=backend, namespace=f"t{uuid.uuid4().hex[:8]}", root=str(tmp_path))


@pytest.fixture
def store(store_config, run, request) -> TensorStore:
    """A fresh, empty store of the test's backend."""
    s = build_store(store_config)
    if store_config.backend == "torchstore":
        run(s.initialize(mesh=request.getfixturevalue("volume_mesh")))
    yield s
    if isinstance(s, ShmTensorStore):
        s.close_sync(unlink=True)
    else:
        run(s.close())


class WeightPublisher(Actor):
    """Trainer-like: owns a model and publishes its state dict under a version key."""

    class Config(StoreConfig):
        pass

    async def setup(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.store = build_store(self.config)

    @endpoint
    async def publish(self, key: str) -> dict[str, float]:
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(1.0)  # a "training step": the published weights differ from the initial ones
        await self.store.put_state_dict(self.model.state_dict(), key)
        return {k: float(v.sum()) for k, v in self.model.state_dict().items()}


class WeightConsumer(Actor):
    """Generator-like: keeps its own model and refreshes it in place from the store."""

    class Config(StoreConfig):
        pass

    async def setup(self) -> None:
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.store = build_store(self.config)

    @endpoint
    async def load(self, key: str) -> dict[str, Any]:
        own = self.model.state_dict()
        ptrs = {k: v.data_ptr() for k, v in own.items()}
        await self.store.get_state_dict(key, user_state_dict=own)
        in_place = all(v.data_ptr() == ptrs[k] for k, v in self.model.state_dict().items())
        return {"sums": {k: float(v.sum()) for k, v in own.items()}, "in_place": in_place}


@pytest.fixture
def weight_actors() -> SimpleNamespace:
    return SimpleNamespace(WeightPublisher=WeightPublisher, WeightConsumer=WeightConsumer)
