"""The in-process :class:`~forge_kernels.rollout.backend.TurnBackend`: a generation function, a
scoring function and an environment's feedback — what the eval app and the benches drive episodes
with.

    backend = LocalTurnBackend.for_environment(generate, env, ConversationTokens(tokenizer))
    episodes = await run_episodes(task, backend.initial_ids(task), k, backend, TurnsConfig(max_turns=4),
                                  group_id=task.name, context=STTSContext(window=4))

``generate(prompts, n) -> list[Completion]`` returns ``n`` completions per prompt (an engine's
``generate(prompts, n, sampling)``); calls are serialised, since an in-process engine need not be
thread-safe, so several tasks' episodes may run concurrently and overlap scoring with generation.
``score(task, completions)`` returns one outcome per completion: ``for_environment`` scores with
``env.step`` in this process (the environment must be set up), the eval app passes its reward
actor's endpoint. ``generate_s`` and ``score_s`` add up the time spent in each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from forge_kernels.env.base import Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.rollout.backend import Continuation, EnvTurnFeedback
from forge_kernels.types import Completion

__all__ = ["GenerateFn", "LocalTurnBackend", "ScoreFn"]

GenerateFn = Callable[[list[list[int]], int], Awaitable[list[Completion]]]
ScoreFn = Callable[[Any, list[Completion]], Awaitable[list[Outcome]]]


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
