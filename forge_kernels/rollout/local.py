"""An in-process :class:`~forge_kernels.env.multiturn.TurnBackend`: any generation function, an
environment and a tokenizer — what the eval app and benchmarks drive multi-turn episodes with.

    backend = LocalTurnBackend(generate, env, ConversationTokens(tokenizer))
    episodes = await run_episodes(task, backend.initial_ids(task), k, backend, TurnsConfig(max_turns=4),
                                  group_id=task.name, context=STTSContext(window=4))

``generate(prompts) -> list[Completion]`` returns one completion per prompt (wrap an engine's
``generate(prompts, 1, sampling)``); calls are serialised, since an in-process engine need not be
thread-safe, so several tasks' episodes may run concurrently and overlap scoring with generation.
The environment must be set up (``await env.setup()``) before scoring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from forge_kernels.env.base import Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.env.multiturn import Continuation, EnvTurnFeedback
from forge_kernels.types import Completion

__all__ = ["LocalTurnBackend"]

GenerateFn = Callable[[list[list[int]]], Awaitable[list[Completion]]]


class LocalTurnBackend:
    """Generation function + environment + chat template, in this process."""

    def __init__(self, generate: GenerateFn, env: Environment, conversation: ConversationTokens,
                 max_concurrent_scores: int = 2) -> None:
        self._generate = generate
        self.env = env
        self.conversation = conversation
        self.feedback = EnvTurnFeedback(env, conversation)
        self._generate_lock = asyncio.Lock()
        self._score_slots = asyncio.Semaphore(max_concurrent_scores)
        self.generated_tokens = 0

    def initial_ids(self, task: Any) -> list[int]:
        """The first prompt of ``task``: the environment's messages through the chat template."""
        return self.conversation.initial_ids(self.env.initial_messages(task))

    async def generate(self, prompts: list[list[int]]) -> list[Completion]:
        async with self._generate_lock:
            completions = await self._generate(prompts)
        self.generated_tokens += sum(len(c.token_ids) for c in completions)
        return completions

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        async def one(c: Completion) -> Outcome:
            async with self._score_slots:
                return await self.env.step(task, c.text)

        return list(await asyncio.gather(*(one(c) for c in completions)))

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        return self.feedback.continue_turns(task, completions, outcomes)
