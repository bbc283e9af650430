"""The seam between the episode driver and whatever generates, scores and continues turns.

:class:`TurnBackend` is three async calls. Two implementations exist:
:class:`~forge_kernels.rollout.actors.ActorTurnBackend` (the GRPO app: generator, reward and
dataset actors) and :class:`~forge_kernels.rollout.local.LocalTurnBackend` (in this process: a
generation function, a scoring function and an environment's feedback — the eval app, benches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from forge_kernels.env.base import Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.types import Completion

__all__ = ["Continuation", "EnvTurnFeedback", "TurnBackend"]


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
