"""Helpers for the GRPO app tests (``tiny_config`` is in tests/conftest.py): reward actors whose
signal a random tiny model can learn from (no kernel needed), and one that breaks mid-run."""

from __future__ import annotations


import pytest

from actors.reward import RewardActor
from forge_kernels.env.base import Outcome
from forge_kernels.runtime import endpoint
from forge_kernels.tasks import Task
from forge_kernels.types import Completion


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


class EvenShareReward(RewardActor):
    """Reward = share of even token ids (a signal a random tiny model can move); solved above 0.6.
    The feedback says the share, so later turns see something that depends on the earlier ones."""

    async def setup(self) -> None:
        self.closed = False

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Outcome]:
        out = []
        for c in completions:
            share = sum(t % 2 == 0 for t in c.token_ids) / max(len(c.token_ids), 1)
            out.append(Outcome(share, share > 0.6, f"even share {share:.2f}", metrics={"correct": float(share > 0.6)}))
        return out

    @endpoint
    async def close(self) -> None:
        self.closed = True


class ProfiledReward(EvenTokenReward):
    """Every kernel "correct", as a GPU evaluation would report it: completions at even positions
    of a call with profiling ratio 0.0 (the work done outside the candidate's kernels), the others
    1.0 — the facts PRS reads. Profiling needs a GPU, so on CPU this stands in for the evaluator."""

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Outcome]:
        return [Outcome(1.0, True, "", {"correct": True, "profiling_ratio": float(i % 2)}, {"correct": 1.0})
                for i, _ in enumerate(completions)]


@pytest.fixture
def rewards():
    """The test reward actor classes (conftest modules are not importable by name)."""
    return {"even": EvenTokenReward, "broken": BrokenReward, "profiled": ProfiledReward}


@pytest.fixture
def even_share_reward():
    """The multi-turn GRPO tests' reward actor (solved when most token ids are even)."""
    return EvenShareReward
