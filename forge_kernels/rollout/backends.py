"""The seam between the episode driver and whatever generates, scores and continues turns.

:class:`TurnBackend` is three async calls, with two implementations:

* :class:`ActorTurnBackend` (the GRPO app): the generator samples, the reward actor scores, the
  dataset actor (environment + tokenizer) renders feedback into the next prompt's ids;
* :class:`LocalTurnBackend` (the eval app, benches): a generation function, a scoring function and
  an environment's feedback, driven from this process::

      backend = LocalTurnBackend.for_environment(generate, env, ConversationTokens(tokenizer))
      episodes = await run_episodes(task, backend.initial_ids(task), k, backend, TurnsConfig(max_turns=4),
                                    group_id=task.name, context=STTSContext(window=4))

  ``generate(prompts, n) -> list[Completion]`` returns ``n`` completions per prompt (an engine's
  ``generate(prompts, n, sampling)``); calls are serialised, since an in-process engine need not
  be thread-safe, so several tasks' episodes may run concurrently and overlap scoring with
  generation. ``score(task, completions)`` returns one outcome per completion: ``for_environment``
  scores with ``env.step`` in this process (the environment must be set up), the eval app passes
  its reward actor's endpoint. ``generate_s`` and ``score_s`` add up the time spent in each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from forge_kernels.env.base import Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.types import Completion

if TYPE_CHECKING:  # handles annotated with their actor classes (the runtime's typed verbs)
    from actors.dataset import DatasetActor
    from actors.generator import Generator
    from actors.reward import RewardActor

__all__ = ["ActorTurnBackend", "Continuation", "EnvTurnFeedback", "GenerateFn", "LocalTurnBackend", "ScoreFn",
           "TurnBackend"]

GenerateFn = Callable[[list[list[int]], int], Awaitable[list[Completion]]]
ScoreFn = Callable[[Any, list[Completion]], Awaitable[list[Outcome]]]


@dataclass
class Continuation:
    """What follows one scored turn: whether the environment is done, and the ids that open the
    next turn (boundary + feedback message + assistant opening)."""

    done: bool
    boundary_ids: list[int]


class TurnBackend(Protocol):
    """What :func:`~forge_kernels.rollout.episodes.run_episodes` needs: a policy, a scorer, and the
    environment's feedback."""

    async def generate(self, prompts: list[list[int]], n: int) -> list[Completion]:
        """``n`` completions per prompt, grouped by prompt in order (``len(prompts) * n``)."""
        ...

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        """One outcome per completion, in order."""
        ...

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        """One continuation per (completion, outcome)."""
        ...


class EnvTurnFeedback:
    """The feedback side of a backend for an in-process environment and tokenizer (the dataset
    actor holds one; so does a local backend)."""

    def __init__(self, env: Environment, conversation: ConversationTokens) -> None:
        self.env, self.conversation = env, conversation

    def continue_turns(self, task: Any, completions: Sequence[Completion],
                       outcomes: Sequence[Outcome]) -> list[Continuation]:
        """``env.is_done`` and the boundary ids for ``env.feedback_message`` of each outcome."""
        if len(completions) != len(outcomes):
            raise ValueError(f"{len(completions)} completions but {len(outcomes)} outcomes")
        return [Continuation(self.env.is_done(task, o),
                             self.conversation.boundary_ids(c.token_ids, self.env.feedback_message(task, o)))
                for c, o in zip(completions, outcomes)]


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


class LocalTurnBackend:
    """Generation, scoring and an environment's feedback, driven from this process."""

    def __init__(self, generate: GenerateFn, score: ScoreFn, feedback: EnvTurnFeedback | None) -> None:
        """``feedback`` may be None for single-turn episodes (nothing continues)."""
        self._generate = generate
        self._score = score
        self.feedback = feedback
        self._generate_lock = asyncio.Lock()
        self.generated_tokens = 0
        self.generate_s = 0.0
        self.score_s = 0.0

    @classmethod
    def for_environment(cls, generate: GenerateFn, env: Environment, conversation: ConversationTokens,
                        max_concurrent_scores: int = 2) -> LocalTurnBackend:
        """Score with ``env.step`` in this process, at most ``max_concurrent_scores`` at once."""
        slots = asyncio.Semaphore(max_concurrent_scores)

        async def score(task: Any, completions: list[Completion]) -> list[Outcome]:
            async def one(c: Completion) -> Outcome:
                async with slots:
                    return await env.step(task, c.text)

            return list(await asyncio.gather(*(one(c) for c in completions)))

        return cls(generate, score, EnvTurnFeedback(env, conversation))

    def initial_ids(self, task: Any) -> list[int]:
        """The first prompt of ``task``: the environment's messages through the chat template."""
        if self.feedback is None:
            raise RuntimeError("initial_ids needs the environment's feedback side (none was given)")
        return self.feedback.conversation.initial_ids(self.feedback.env.initial_messages(task))

    async def generate(self, prompts: list[list[int]], n: int) -> list[Completion]:
        async with self._generate_lock:
            start = time.monotonic()
            completions = await self._generate(prompts, n)
            self.generate_s += time.monotonic() - start
        if len(completions) != len(prompts) * n:
            raise RuntimeError(f"generate returned {len(completions)} completions for {len(prompts)} prompt(s) x {n}")
        self.generated_tokens += sum(len(c.token_ids) for c in completions)
        return completions

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        start = time.monotonic()
        outcomes = await self._score(task, completions)
        self.score_s += time.monotonic() - start
        return outcomes

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        if self.feedback is None:
            raise RuntimeError("continue_turns on a single-turn backend (no environment feedback was given)")
        return self.feedback.continue_turns(task, completions, outcomes)
