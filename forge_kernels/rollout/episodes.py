"""Multi-turn episodes: generate, score, show the feedback, generate again — for a whole group at once.

:func:`run_episodes` drives ``n`` episodes of one task turn by turn. Each turn it asks for one
completion per still-active episode in a single ``generate`` call, scores them in a single
``score`` call, and for episodes that go on, appends the template's boundary ids and the
environment's feedback message (ids from :class:`TurnBackend.continue_turns`) to build the next
prompt. An episode stops when

* the environment says it is done (``stop_on: done``, i.e. ``env.is_done``; ``never`` ignores it),
* it has ``max_turns`` turns,
* the next prompt plus ``response_tokens`` would exceed ``max_context_tokens``, or
* the scorer failed (reward ``None``: there is no feedback worth showing).

The next prompt is chosen by a :data:`ContextBuilder`: :func:`full_context` (the default, and what
training uses) chains every turn, so turn ``k``'s prompt is turn ``k-1``'s whole sequence plus the
boundary — one training row holds the whole episode; :class:`forge_kernels.env.stts.STTSContext`
keeps the first prompt and the best earlier turns only (test time).

The backend is three async calls, so the same driver runs inside the GRPO app (actors) and the
eval app (an engine and an environment in-process; :class:`EnvTurnFeedback` implements the
feedback side for any :class:`~forge_kernels.env.base.Environment`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.env.base import Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.types import Completion, Episode, Turn

__all__ = [
    "ContextBuilder",
    "Continuation",
    "EnvTurnFeedback",
    "EpisodeState",
    "Segment",
    "TurnBackend",
    "TurnsConfig",
    "full_context",
    "run_episodes",
]

StopOn = Literal["done", "never"]


class TurnsConfig(StrictModel):
    """How many turns an episode may take and when it stops early."""

    max_turns: int = Field(default=1, ge=1, description="turns per episode (1: single-turn)")
    max_context_tokens: int | None = Field(
        default=None, ge=1, description="stop before a turn whose prompt + response budget would exceed this")
    stop_on: StopOn = Field(default="done", description="'done': stop when env.is_done (default: solved); "
                                                        "'never': always run max_turns")


@dataclass
class Continuation:
    """What follows one scored turn: whether the environment is done, and the ids that open the
    next turn (boundary + feedback message + assistant opening)."""

    done: bool
    boundary_ids: list[int]


@dataclass
class Segment:
    """One finished turn as context material: its sampled ids, the boundary after it, its reward."""

    sampled_ids: list[int]
    boundary_ids: list[int]
    reward: float


ContextBuilder = Callable[[list[int], list[Segment]], list[int]]


def full_context(initial_ids: list[int], segments: list[Segment]) -> list[int]:
    """Every turn in order: the prefix-chained conversation training uses."""
    ids = list(initial_ids)
    for s in segments:
        ids += s.sampled_ids + s.boundary_ids
    return ids


class TurnBackend(Protocol):
    """What :func:`run_episodes` needs: a policy, a scorer, and the environment's feedback."""

    async def generate(self, prompts: list[list[int]]) -> list[Completion]:
        """One completion per prompt, in order."""
        ...

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        """One outcome per completion, in order."""
        ...

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        """One continuation per (completion, outcome)."""
        ...


class EnvTurnFeedback:
    """The feedback side of a backend for an in-process environment and tokenizer."""

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


@dataclass
class EpisodeState:
    """One episode in progress."""

    episode_id: str
    initial_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)  # finished turns that were continued
    next_prompt: list[int] = field(default_factory=list)  # the prompt of the next turn
    stop_reason: str | None = None  # done | max_turns | context_limit | scorer_failed

    @property
    def active(self) -> bool:
        return self.stop_reason is None


def _turn_info(outcome: Outcome, turn: int) -> dict[str, Any]:
    return {**outcome.info, "turn": turn, "success": outcome.success, "reward_valid": outcome.reward is not None}


async def run_episodes(
    task: Any,
    initial_ids: list[int],
    n: int,
    backend: TurnBackend,
    turns: TurnsConfig,
    *,
    group_id: str,
    task_name: str | None = None,
    response_tokens: int = 0,
    context: ContextBuilder = full_context,
) -> list[Episode]:
    """``n`` episodes of ``task`` from the same first prompt, turns driven in lock step.

    ``response_tokens`` is the generation budget per turn (``sampling.max_tokens``), used with
    ``turns.max_context_tokens``. Returned episodes carry ``info["stop_reason"]`` on their last
    turn; episode ids are ``f"{group_id}-{i}"``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not initial_ids:
        raise ValueError("initial_ids is empty: the first prompt needs at least one token")
    states = [EpisodeState(f"{group_id}-{i}", list(initial_ids), next_prompt=list(initial_ids)) for i in range(n)]
    for k in range(1, turns.max_turns + 1):
        active = [s for s in states if s.active]
        if not active:
            break
        completions = await backend.generate([s.next_prompt for s in active])
        if len(completions) != len(active):
            raise RuntimeError(f"generate returned {len(completions)} completions for {len(active)} prompts")
        outcomes = await backend.score(task, completions)
        if len(outcomes) != len(active):
            raise RuntimeError(f"score returned {len(outcomes)} outcomes for {len(completions)} completions")
        for s, c, o in zip(active, completions, outcomes):
            s.turns.append(Turn(c, reward=o.reward or 0.0, feedback=o.feedback, info=_turn_info(o, k)))
            if o.reward is None:
                s.stop_reason = "scorer_failed"
            elif k == turns.max_turns:
                s.stop_reason = "max_turns"
        going = [(i, s) for i, s in enumerate(active) if s.active]
        if not going:
            continue
        conts = await backend.continue_turns(task, [completions[i] for i, _ in going], [outcomes[i] for i, _ in going])
        for (i, s), cont in zip(going, conts):
            if turns.stop_on == "done" and cont.done:
                s.stop_reason = "done"
                continue
            reward = outcomes[i].reward or 0.0
            s.segments.append(Segment(list(completions[i].token_ids), list(cont.boundary_ids), reward))
            s.next_prompt = context(s.initial_ids, s.segments)
            limit = turns.max_context_tokens
            if limit is not None and len(s.next_prompt) + response_tokens > limit:
                s.stop_reason = "context_limit"
    episodes = []
    for s in states:
        s.turns[-1].info["stop_reason"] = s.stop_reason
        episodes.append(Episode(s.episode_id, group_id, task_name or getattr(task, "name", str(task)), s.turns))
    return episodes

