"""Sampling and scoring: each task's k episodes as per-turn :class:`SampleRecord` lists.

The seam between the app and an episode driver is :data:`EpisodeFn`: given a task, its prompt ids
and k, return k episodes, each the list of its turns' records (turn 1 first). Single-turn
evaluation is :func:`single_turn_episodes`; a multi-turn driver plugs in with the same signature.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from actors.reward import Scored
from forge_kernels.eval.report import NO_CODE, SampleRecord
from forge_kernels.tasks import Task
from forge_kernels.types import Completion

from apps.eval.policy import Policy

__all__ = ["EpisodeFn", "EvalRun", "record_from_scored", "run_episodes", "single_turn_episodes"]

log = logging.getLogger("apps.eval")

Episode = list[SampleRecord]
EpisodeFn = Callable[[Task, list[int], int], Awaitable[list[Episode]]]


@dataclass
class EvalRun:
    """Everything sampled and scored: episodes per task (task order kept) and run facts."""

    episodes: dict[str, list[Episode]] = field(default_factory=dict)
    devices: set[str] = field(default_factory=set)
    timing_notes: set[str] = field(default_factory=set)
    generate_s: float = 0.0
    score_s: float = 0.0

    @property
    def max_turns(self) -> int:
        return max((len(ep) for eps in self.episodes.values() for ep in eps), default=0)


def record_from_scored(task: str, sample: int, turn: int, completion: Completion, scored: Scored) -> SampleRecord:
    """The metrics record of one scored completion."""
    result = scored.result
    return SampleRecord(
        task=task, sample=sample, turn=turn, extracted=scored.extracted, compiled=scored.compiled,
        correct=scored.correct, fault=NO_CODE if result is None else result.fault.value,
        speedup=None if result is None else result.speedup,
        speedup_vs_compile=None if result is None else result.speedup_vs_compile,
        reward=scored.reward, completion_tokens=len(completion.token_ids), finish_reason=completion.finish_reason,
    )


def single_turn_episodes(policy: Policy, reward: Any, run: EvalRun) -> EpisodeFn:
    """An :data:`EpisodeFn`: k completions of the first-turn prompt, scored by the reward actor."""

    async def episodes(task: Task, prompt_ids: list[int], k: int) -> list[Episode]:
        start = time.monotonic()
        completions = await policy.generate(task, prompt_ids, k)
        if len(completions) != k:
            raise RuntimeError(f"policy {policy.name} returned {len(completions)} completions for {task.name}, "
                               f"expected {k}")
        scored_at = time.monotonic()
        scored: list[Scored] = await reward.score.call_one(task, completions)
        run.generate_s += scored_at - start
        run.score_s += time.monotonic() - scored_at
        for s in scored:
            if s.result is not None:
                run.devices.add(s.result.device)
                if s.result.correct and not s.result.timing_available and s.result.timing_note:
                    run.timing_notes.add(s.result.timing_note)
        return [[record_from_scored(task.name, i, 1, c, s)]
                for i, (c, s) in enumerate(zip(completions, scored, strict=True))]

    return episodes


async def run_episodes(tasks: list[Task], prompts: dict[str, list[int]], k: int, episode_fn: EpisodeFn,
                       run: EvalRun, max_concurrent_tasks: int) -> EvalRun:
    """k episodes of every task, ``max_concurrent_tasks`` tasks at a time; progress on stderr."""
    slots = asyncio.Semaphore(max_concurrent_tasks)
    done = 0

    async def one(task: Task) -> list[Episode]:
        nonlocal done
        async with slots:
            episodes = await episode_fn(task, prompts[task.name], k)
        done += 1
        correct = sum(ep[-1].correct for ep in episodes)
        print(f"[{done}/{len(tasks)}] {task.name}: {correct}/{k} correct", file=sys.stderr, flush=True)
        return episodes

    results = await asyncio.gather(*(one(t) for t in tasks))
    for task, episodes in zip(tasks, results, strict=True):
        run.episodes[task.name] = episodes
    return run
