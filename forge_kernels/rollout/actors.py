"""The :class:`~forge_kernels.rollout.backend.TurnBackend` over actors (the GRPO app): the
generator samples, the reward actor scores, the dataset actor (environment + tokenizer) renders
feedback into the next prompt's ids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forge_kernels.env.base import Outcome
from forge_kernels.rollout.backend import Continuation
from forge_kernels.types import Completion

if TYPE_CHECKING:  # handles annotated with their actor classes (the runtime's typed verbs)
    from actors.dataset import DatasetActor
    from actors.generator import Generator
    from actors.reward import RewardActor

__all__ = ["ActorTurnBackend"]


class ActorTurnBackend:
    """Turns through the app's generator, reward and dataset handles; counts generated tokens."""

    def __init__(self, generator: Generator, reward: RewardActor, dataset: DatasetActor) -> None:
        self.generator, self.reward, self.dataset = generator, reward, dataset
        self.generated_tokens = 0

    async def generate(self, prompts: list[list[int]], n: int) -> list[Completion]:
        completions = await self.generator.generate.one(prompts, n)
        self.generated_tokens += sum(len(c.token_ids) for c in completions)
        return completions

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        return await self.reward.score.one(task, completions)

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        return await self.dataset.continue_turns.one(task, completions, outcomes)
