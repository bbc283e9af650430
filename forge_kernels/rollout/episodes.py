"""The one episode driver: ``n`` episodes of one task from a shared first prompt, turn by turn.

:func:`run_episodes` samples the ``n`` first turns with one ``generate(prompt, n)`` call (an engine
shares the prompt's prefill), scores them in one ``score`` call and — for episodes that go on —
appends the boundary and the environment's feedback (ids from
:meth:`TurnBackend.continue_turns`) to build each next prompt; later turns ask for one completion
per still-active episode, again in one call. A single-turn episode is ``max_turns: 1``. An
episode stops when

* the environment says it is done (``stop_on: done``, i.e. ``env.is_done``; ``never`` ignores it),
* it has ``max_turns`` turns,
* the next prompt plus ``response_tokens`` would exceed ``max_context_tokens``, or
* the scorer failed (reward ``None``: there is no feedback worth showing).

The next prompt comes from a :data:`~forge_kernels.rollout.context.ContextBuilder` (every turn by
default; STTS at test time). The same driver runs in the GRPO app (over actors) and in the eval
app and benches (in process): only the backend differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.env.base import Outcome
from forge_kernels.rollout.backends import TurnBackend
from forge_kernels.rollout.context import ContextBuilder, Segment, full_context
from forge_kernels.types import Completion, Episode, Turn

__all__ = ["EpisodeState", "TurnsConfig", "run_episodes", "turn_from_outcome"]

StopOn = Literal["done", "never"]


class TurnsConfig(StrictModel):
    """How many turns an episode may take and when it stops early."""

    max_turns: int = Field(default=1, ge=1, description="turns per episode (1: single-turn)")
    max_context_tokens: int | None = Field(
        default=None, ge=1, description="stop before a turn whose prompt + response budget would exceed this")
    stop_on: StopOn = Field(default="done", description="'done': stop when env.is_done (default: solved); "
                                                        "'never': always run max_turns")


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


def turn_from_outcome(completion: Completion, outcome: Outcome, index: int) -> Turn:
    """The :class:`Turn` of one scored completion (a failed scorer's reward counts 0, marked invalid)."""
    return Turn(completion, reward=outcome.reward or 0.0, feedback=outcome.feedback, info=dict(outcome.info),
                index=index, success=outcome.success, reward_valid=outcome.reward is not None,
                metrics=dict(outcome.metrics))


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
    ``turns.max_context_tokens``. Episode ids are ``f"{group_id}-{i}"``; each episode's
    ``stop_reason`` says why it ended.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not initial_ids and turns.max_turns > 1:
        raise ValueError("initial_ids is empty: a multi-turn episode's first prompt needs at least one token")
    states = [EpisodeState(f"{group_id}-{i}", list(initial_ids), next_prompt=list(initial_ids)) for i in range(n)]
    for k in range(1, turns.max_turns + 1):
        active = [s for s in states if s.active]
        if not active:
            break
        if k == 1:  # one prompt, n samples
            completions = await backend.generate([list(initial_ids)], n)
        else:
            completions = await backend.generate([s.next_prompt for s in active], 1)
        if len(completions) != len(active):
            raise RuntimeError(f"generate returned {len(completions)} completions for {len(active)} episodes")
        outcomes = await backend.score(task, completions)
        if len(outcomes) != len(active):
            raise RuntimeError(f"score returned {len(outcomes)} outcomes for {len(completions)} completions")
        for s, c, o in zip(active, completions, outcomes):
            s.turns.append(turn_from_outcome(c, o, k))
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
    name = task_name or getattr(task, "name", str(task))
    return [Episode(s.episode_id, group_id, name, s.turns, stop_reason=s.stop_reason) for s in states]
