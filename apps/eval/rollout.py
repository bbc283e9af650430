"""Sampling and scoring: each task's k episodes, turned into per-turn :class:`SampleRecord` lists.

The seam between the app and an episode driver is :data:`EpisodeFn`: given a task, its first
prompt's ids and k, return k :class:`~forge_kernels.types.Episode` s (turn 1 first; ``Turn.info``
as the environment's ``Outcome.info`` plus ``turn``). :func:`single_turn_episodes` samples k
replies with one ``generate`` call; :func:`multi_turn_episodes` runs the lock-step driver
(:func:`forge_kernels.env.multiturn.run_episodes`) with the configured context (STTS by default).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from forge_kernels.env.base import Outcome
from forge_kernels.env.multiturn import Continuation, EnvTurnFeedback, full_context, run_episodes
from forge_kernels.env.stts import STTSContext
from apps.eval.report import NO_CODE, SampleRecord
from forge_kernels.types import Completion, Episode, Turn

from apps.eval.config import EvalAppConfig
from apps.eval.policy import Policy

__all__ = ["EpisodeFn", "EvalRun", "TurnBackend", "multi_turn_episodes", "record_from_turn", "run_all",
           "single_turn_episodes"]

EpisodeFn = Callable[[Any, list[int], int], Awaitable[list[Episode]]]


@dataclass
class EvalRun:
    """Everything sampled and scored: per task (task order kept) its episodes' per-turn records."""

    episodes: dict[str, list[list[SampleRecord]]] = field(default_factory=dict)
    devices: set[str] = field(default_factory=set)
    stop_reasons: Counter[str] = field(default_factory=Counter)
    generate_s: float = 0.0
    score_s: float = 0.0

    @property
    def max_turns(self) -> int:
        return max((len(ep) for eps in self.episodes.values() for ep in eps), default=0)


def record_from_turn(task: str, sample: int, turn: Turn) -> SampleRecord:
    """The metrics record of one scored turn (``Turn.info`` as the kernel environments write it)."""
    info = turn.info
    fault = info.get("fault")
    valid = info.get("reward_valid", True)
    return SampleRecord(
        task=task, sample=sample, turn=int(info.get("turn", 1)), extracted=bool(info.get("extracted")),
        compiled=bool(info.get("compiled")), correct=bool(info.get("correct")),
        fault=NO_CODE if fault is None else str(fault),
        speedup=info.get("speedup"), speedup_vs_compile=info.get("speedup_vs_compile"),
        reward=turn.reward if valid else None, completion_tokens=len(turn.completion.token_ids),
        finish_reason=turn.completion.finish_reason,
    )


class TurnBackend:
    """The multi-turn driver's backend for one task: the policy, the reward actor, the environment's
    feedback (in-process); keeps the run's generation and scoring time."""

    def __init__(self, task: Any, policy: Policy, reward: Any, feedback: EnvTurnFeedback | None, run: EvalRun):
        self.task, self.policy, self.reward, self.feedback, self.run = task, policy, reward, feedback, run

    async def sample(self, prompts: list[list[int]], n: int) -> list[Completion]:
        start = time.monotonic()
        completions = await self.policy.generate(self.task, prompts, n)
        self.run.generate_s += time.monotonic() - start
        if len(completions) != len(prompts) * n:
            raise RuntimeError(f"policy {self.policy.name} returned {len(completions)} completions for "
                               f"{len(prompts)} prompt(s) x {n}")
        return completions

    async def generate(self, prompts: list[list[int]]) -> list[Completion]:
        return await self.sample(prompts, 1)

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        start = time.monotonic()
        outcomes: list[Outcome] = await self.reward.score.call_one(task, completions)
        self.run.score_s += time.monotonic() - start
        self.run.devices.update(o.info["device"] for o in outcomes if o.info.get("device"))
        return outcomes

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        if self.feedback is None:
            raise RuntimeError("continue_turns on a single-turn backend (no environment feedback was set up)")
        return self.feedback.continue_turns(task, completions, outcomes)


def single_turn_episodes(policy: Policy, reward: Any, run: EvalRun) -> EpisodeFn:
    """k replies to the first prompt (one ``generate`` call with ``n = k``), each scored once."""

    async def episodes(task: Any, initial_ids: list[int], k: int) -> list[Episode]:
        backend = TurnBackend(task, policy, reward, None, run)
        completions = await backend.sample([initial_ids], k)
        outcomes = await backend.score(task, completions)
        return [Episode(f"{task.name}-{i}", task.name, task.name, [Turn(
            c, reward=o.reward or 0.0, feedback=o.feedback,
            info={**o.info, "turn": 1, "success": o.success, "reward_valid": o.reward is not None,
                  "stop_reason": "max_turns"})])
            for i, (c, o) in enumerate(zip(completions, outcomes, strict=True))]

    return episodes


def multi_turn_episodes(cfg: EvalAppConfig, policy: Policy, reward: Any, feedback: EnvTurnFeedback,
                        run: EvalRun) -> EpisodeFn:
    """k episodes of up to ``turns.max_turns`` turns, driven in lock step; later prompts are built by
    the configured context (STTS: first prompt + best ``window`` earlier turns; or every turn)."""
    context = STTSContext(cfg.context.window) if cfg.context.kind == "stts" else full_context

    async def episodes(task: Any, initial_ids: list[int], k: int) -> list[Episode]:
        return await run_episodes(task, initial_ids, k, TurnBackend(task, policy, reward, feedback, run), cfg.turns,
                                  group_id=task.name, response_tokens=cfg.policy.generator.sampling.max_tokens,
                                  context=context)

    return episodes


async def run_all(tasks: list[Any], prompts: dict[str, list[int]], k: int, episode_fn: EpisodeFn, run: EvalRun,
                  max_concurrent_tasks: int) -> EvalRun:
    """k episodes of every task, ``max_concurrent_tasks`` tasks at a time; progress on stderr."""
    slots = asyncio.Semaphore(max_concurrent_tasks)
    done = 0

    async def one(task: Any) -> list[Episode]:
        nonlocal done
        async with slots:
            episodes = await episode_fn(task, prompts[task.name], k)
        if len(episodes) != k:
            raise RuntimeError(f"{task.name}: {len(episodes)} episodes, expected {k}")
        done += 1
        solved = sum(any(t.info.get("correct") for t in ep.turns) for ep in episodes)
        print(f"[{done}/{len(tasks)}] {task.name}: {solved}/{k} correct", file=sys.stderr, flush=True)
        return episodes

    results = await asyncio.gather(*(one(t) for t in tasks))
    for task, episodes in zip(tasks, results, strict=True):
        run.episodes[task.name] = [[record_from_turn(task.name, i, t) for t in ep.turns]
                                   for i, ep in enumerate(episodes)]
        run.stop_reasons.update(str(ep.turns[-1].info.get("stop_reason")) for ep in episodes)
    return run
