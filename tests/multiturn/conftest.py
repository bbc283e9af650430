"""Fixtures for the multi-turn tests: the tiny model's tokenizer (ChatML template) and a reward
actor a random tiny model can learn from (no kernel evaluation); ``tiny_config`` is in tests/conftest.py."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from actors.reward import RewardActor
from forge_kernels.env.base import Outcome
from forge_kernels.models.tiny import train_tokenizer
from forge_kernels.runtime import endpoint
from forge_kernels.tasks import Task
from forge_kernels.types import Completion


CORPUS = ["def forward(self, x):\n    return x * 2\n", "Result: output_value_mismatch. The output values differ.",
          "Write ModelNew using Triton kernels.", "```python\nimport torch\n```"] * 4


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny model's tokenizer: byte-level BPE, ChatML template, eos ``<|im_end|>``."""
    return train_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture
def run():
    """``run(coro)``: run a coroutine on a fresh loop, bounded so no test hangs."""

    def go(coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return go


class EvenShareReward(RewardActor):
    """Reward = share of even token ids (a signal a random tiny model can move); solved above 0.6.
    The feedback says the share, so later turns see something that depends on the earlier ones."""

    async def setup(self) -> None:
        pass

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Outcome]:
        out = []
        for c in completions:
            share = sum(t % 2 == 0 for t in c.token_ids) / max(len(c.token_ids), 1)
            out.append(Outcome(share, share > 0.6, f"even share {share:.2f}", metrics={"correct": float(share > 0.6)}))
        return out

    @endpoint
    async def close(self) -> None:
        pass


@pytest.fixture
def even_share_reward():
    return EvenShareReward
