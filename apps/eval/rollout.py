"""Sampling and scoring: each task's k episodes, turned into per-turn :class:`SampleRecord` lists.

The seam between the app and the episode driver is :data:`EpisodeFn`: given a task, its first
prompt's ids and k, return k :class:`~forge_kernels.types.Episode` s. :func:`episode_fn` runs
:func:`forge_kernels.rollout.run_episodes` over a :class:`~forge_kernels.rollout.LocalTurnBackend`
(the policy samples, the reward actor scores, the environment renders feedback in this process).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from forge_kernels.rollout import EnvTurnFeedback, LocalTurnBackend, STTSContext, full_context, run_episodes
from apps.eval.report import NO_CODE, SampleRecord
from forge_kernels.types import Completion, Episode, Turn

from apps.eval.config import EvalAppConfig
from apps.eval.policy import Policy

__all__ = ["EpisodeFn", "EvalRun", "episode_fn", "record_from_turn", "run_all"]

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
    return SampleRecord(
        task=task, sample=sample, turn=turn.index, extracted=bool(info.get("extracted")),
        compiled=bool(info.get("compiled")), correct=bool(info.get("correct")),
        fault=NO_CODE if fault is None else str(fault),
        speedup=info.get("speedup"), speedup_vs_compile=info.get("speedup_vs_compile"),
        reward=turn.reward if turn.reward_valid else None, completion_tokens=len(turn.completion.token_ids),
        finish_reason=turn.completion.finish_reason,
    )


def episode_fn(cfg: EvalAppConfig, policy: Policy, reward: Any, feedback: EnvTurnFeedback | None,
               run: EvalRun) -> EpisodeFn:
    """k episodes of a task through the one episode driver: the first turn samples k replies to the
    first prompt in one call; with ``turns.max_turns > 1`` later prompts are built by the
    configured context (STTS: first prompt + best ``window`` earlier turns; or every turn).
    ``reward`` is the reward actor's handle; ``feedback`` None is fine for single-turn runs."""
    context = STTSContext(cfg.context.window) if cfg.context.kind == "stts" else full_context

    async def episodes(task: Any, initial_ids: list[int], k: int) -> list[Episode]:
        async def generate(prompts: list[list[int]], n: int) -> list[Completion]:
            return await policy.generate(task, prompts, n)

        backend = LocalTurnBackend(generate, reward.score.one, feedback)
        eps = await run_episodes(task, initial_ids, k, backend, cfg.turns, group_id=task.name,
                                 response_tokens=cfg.policy.generator.sampling.max_tokens, context=context)
        run.generate_s += backend.generate_s
        run.score_s += backend.score_s
        run.devices.update(t.info["device"] for ep in eps for t in ep.turns if t.info.get("device"))
        return eps

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
        run.stop_reasons.update(str(ep.stop_reason) for ep in episodes)
    return run
