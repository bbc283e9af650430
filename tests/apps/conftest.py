"""Helpers for the GRPO app tests: the tiny CI config with a private run dir and store namespace,
and a reward actor whose signal a random tiny model can learn from (no kernel needed)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from actors.reward import RewardActor
from apps.grpo.config import GRPOConfig
from forge_kernels.config import load_config
from forge_kernels.env.base import Outcome
from forge_kernels.runtime import endpoint
from forge_kernels.tasks import Task
from forge_kernels.types import Completion

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "grpo_tiny.yaml"


@pytest.fixture
def tiny_config(tmp_path):
    """``tiny_config(*overrides)`` -> GRPOConfig from configs/grpo_tiny.yaml, isolated in tmp_path."""

    def make(*overrides: str) -> GRPOConfig:
        base = [f"run_dir={tmp_path}/run", f"store.namespace=t{uuid.uuid4().hex[:8]}",
                f"store.root={tmp_path}/shm", f"metrics.backends.1.path={tmp_path}/metrics.jsonl"]
        return load_config(GRPOConfig, TINY, [*base, *overrides])

    return make


class EvenTokenReward(RewardActor):
    """Reward = share of even token ids: a dense signal that needs no evaluator."""

    async def setup(self) -> None:
        self.closed = False

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Outcome]:
        return [Outcome(sum(t % 2 == 0 for t in c.token_ids) / max(len(c.token_ids), 1), False, "")
                for c in completions]

    @endpoint
    async def close(self) -> None:
        self.closed = True


class BrokenReward(EvenTokenReward):
    """Fails on its second call, like an actor hitting a bug mid-run."""

    async def setup(self) -> None:
        self.calls = 0

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Outcome]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("reward backend exploded")
        return await super().score(task, completions)


@pytest.fixture
def rewards():
    """The test reward actor classes (conftest modules are not importable by name)."""
    return {"even": EvenTokenReward, "broken": BrokenReward}
