"""The reward actor: score each completion of a group with the environment's ``step``.

The environment (``env`` section) turns a reply into an action and scores it — for the Triton
environment: extract the ``ModelNew`` module, evaluate it (embedded evaluator or eval service),
apply the reward function, write the feedback. This actor holds one environment for its lifetime,
bounds how many steps run at once and records per-step metrics.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.env.base import EnvSpec, Outcome, build_environment
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.types import Completion

__all__ = ["RewardActor"]


class RewardActor(Actor):
    """Scores completions of one task through the configured environment."""

    class Config(StrictModel):
        env: EnvSpec = Field(default_factory=EnvSpec,
                             description="the environment that scores replies; the GRPO app fills it in")
        max_concurrency: int = Field(default=2, ge=1, description="environment steps (evaluations) in flight at once")

    async def setup(self) -> None:
        self.env = build_environment(self.config.env)
        await self.env.setup()
        self._slots = asyncio.Semaphore(self.config.max_concurrency)

    @endpoint
    async def score(self, task: object, completions: list[Completion]) -> list[Outcome]:
        """One :class:`Outcome` per completion, in order."""
        return list(await asyncio.gather(*(self._score_one(task, c.text) for c in completions)))

    async def _score_one(self, task: object, text: str) -> Outcome:
        async with self._slots:
            start = time.monotonic()
            outcome = await self.env.step(task, text)
        record_metric("env/step_s", time.monotonic() - start)
        failure = outcome.info.get("parse_failure")
        if failure is not None:
            record_metric(f"eval/extract_fail/{failure}", 1, Reduce.SUM)
        if outcome.reward is None:
            record_metric("env/scorer_failed", 1, Reduce.SUM)
        return outcome

    @endpoint
    async def close(self) -> None:
        """Release the environment's resources (the evaluator, a local eval server)."""
        await self.env.close()
