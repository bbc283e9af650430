"""The two loops of the GRPO app, joined by the replay buffer.

``continuous_rollouts``: sample a task, generate a group, score it, add reference logprobs,
add the group to the buffer — forever, pausing while the buffer is full. With ``rollout.turns``
a group is ``group_size`` multi-turn episodes driven in lock step by
:func:`forge_kernels.env.multiturn.run_episodes` (one generate and one score call per turn for the
group's still-active episodes; the dataset actor renders the feedback into the next prompt's ids).
``continuous_training``: take a batch of groups trainable at the current version, compute
advantages, take an optimiser step, publish the weights and have the generator load them
(in the background: generation pauses only for the copy itself).
``synchronous_steps``: the same pieces, one phase after the other (mode: sync).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from collections.abc import Awaitable, Callable
from typing import Any

from actors.engines.batching import is_prefix_chained
from forge_kernels.env.base import Outcome
from forge_kernels.env.multiturn import Continuation, run_episodes
from forge_kernels.env.turn_metrics import turn_summary
from forge_kernels.metrics import MetricLogger, Reduce, record_metric
from forge_kernels.runtime import collect_metric_states
from forge_kernels.types import Completion, Episode, Turn

from apps.grpo.config import GRPOConfig

__all__ = ["ActorTurnBackend", "Actors", "LoopState", "call", "call_all", "call_trainer", "continuous_rollouts",
           "continuous_training", "rollout_group", "synchronous_steps"]

POLL_S = 0.02


async def call(handle: Any, endpoint: str, *args: Any) -> Any:
    """One answer from a mesh (``call_one``) or a service (``route``)."""
    ep = getattr(handle, endpoint)
    return await (ep.route(*args) if hasattr(ep, "route") else ep.call_one(*args))


async def call_all(handle: Any, endpoint: str, *args: Any) -> list[Any]:
    """Every replica (``fanout``) or every rank (``call``)."""
    ep = getattr(handle, endpoint)
    return await (ep.fanout(*args) if hasattr(ep, "fanout") else ep.call(*args))


async def call_trainer(trainer: Any, endpoint: str, *args: Any) -> Any:
    """A trainer endpoint on every rank (a multi-process trainer's steps are collectives); rank 0's
    answer (every rank computes the same)."""
    return (await call_all(trainer, endpoint, *args))[0]


@dataclass
class Actors:
    """Handles of the spawned actors (``reference`` is None when not needed)."""

    dataset: Any
    generator: Any
    reward: Any
    advantages: Any
    buffer: Any
    trainer: Any
    reference: Any | None = None

    def all(self) -> list[Any]:
        return [h for h in (self.dataset, self.generator, self.reward, self.advantages, self.buffer,
                            self.trainer, self.reference) if h is not None]


@dataclass
class LoopState:
    """What the loops share in the controller."""

    version: int = 0  # the trainer's policy version
    generated_tokens: int = 0
    groups_in_flight: int = 0  # being rolled out right now
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    history: list[dict[str, float]] = field(default_factory=list)  # flushed scalars, one per step


class ActorTurnBackend:
    """:func:`run_episodes`' backend over the app's actors: the generator samples, the reward actor
    scores, the dataset actor (environment + tokenizer) renders feedback into the next prompt."""

    def __init__(self, actors: Actors, state: LoopState) -> None:
        self.actors, self.state = actors, state

    async def generate(self, prompts: list[list[int]]) -> list[Completion]:
        completions = await call(self.actors.generator, "generate", prompts, 1)
        self.state.generated_tokens += sum(len(c.token_ids) for c in completions)
        return completions

    async def score(self, task: Any, completions: list[Completion]) -> list[Outcome]:
        return await call(self.actors.reward, "score", task, completions)

    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        return await call(self.actors.dataset, "continue_turns", task, completions, outcomes)


async def add_episode_ref_logprobs(reference: Any, episodes: list[Episode]) -> None:
    """Reference logprobs of every sampled token of prefix-chained episodes, one forward per
    episode (its whole sequence), in turn order as :func:`collate_turns` expects."""
    views = []
    for ep in episodes:
        if not is_prefix_chained(ep):
            raise ValueError(f"episode {ep.episode_id}: turns are not prefix-chained; cannot score it as one sequence")
        first, last = ep.turns[0].completion, ep.turns[-1].completion
        rest = (last.prompt_ids + last.token_ids)[len(first.prompt_ids):]
        views.append(Completion(first.prompt_ids, rest, "", [0.0] * len(rest), last.policy_version))
    refs = await call(reference, "logprobs", views)
    for ep, ref in zip(episodes, refs, strict=True):
        base = len(ep.turns[0].completion.prompt_ids)
        ep.ref_logprobs = [lp for t in ep.turns
                           for lp in ref[len(t.completion.prompt_ids) - base:][: len(t.completion.token_ids)]]


async def _single_turn_group(actors: Actors, cfg: GRPOConfig, state: LoopState, sample: Any) -> list[Episode]:
    completions = await call(actors.generator, "generate", [sample.prompt_ids], cfg.rollout.group_size)
    scored = await call(actors.reward, "score", sample.task, completions)
    refs = await call(actors.reference, "logprobs", completions) if actors.reference is not None else None
    state.generated_tokens += sum(len(c.token_ids) for c in completions)
    episodes = []
    for i, (completion, result) in enumerate(zip(completions, scored, strict=True)):
        info = {**result.info, "reward_valid": result.reward is not None}
        turn = Turn(completion, reward=result.reward or 0.0, feedback=result.feedback, info=info)
        episodes.append(Episode(f"{sample.group_id}-{i}", sample.group_id, sample.task.name, [turn],
                                ref_logprobs=None if refs is None else refs[i]))
    return episodes


async def rollout_group(actors: Actors, cfg: GRPOConfig, state: LoopState) -> list[Episode]:
    """One group: ``group_size`` episodes of one task (single- or multi-turn), scored, with
    reference logprobs when a reference model runs."""
    start = time.monotonic()
    sample = await call(actors.dataset, "sample", state.version)
    turns = cfg.rollout.turns
    if turns is None:
        episodes = await _single_turn_group(actors, cfg, state, sample)
    else:
        episodes = await run_episodes(sample.task, sample.prompt_ids, cfg.rollout.group_size,
                                      ActorTurnBackend(actors, state), turns, group_id=sample.group_id,
                                      task_name=sample.task.name, response_tokens=cfg.generator.sampling.max_tokens)
        if actors.reference is not None:
            await add_episode_ref_logprobs(actors.reference, episodes)
        for ep in episodes:
            record_metric(f"rollout/stop/{ep.turns[-1].info['stop_reason']}", 1, Reduce.SUM)
    record_metric("perf/rollout_group_s", time.monotonic() - start)
    return episodes


async def continuous_rollouts(actors: Actors, cfg: GRPOConfig, state: LoopState) -> None:
    """Produce groups until told to stop; wait while buffered + in-flight groups reach the limit
    (each group produced beyond what training consumes only ages in the buffer)."""
    while not state.stop.is_set():
        ahead = await call(actors.buffer, "num_groups") + state.groups_in_flight
        if ahead >= cfg.rollout.buffered_limit:
            await asyncio.sleep(POLL_S)
            continue
        state.groups_in_flight += 1
        try:
            group = await rollout_group(actors, cfg, state)
        finally:
            state.groups_in_flight -= 1
        await call(actors.buffer, "add", group)


async def _next_batch(actors: Actors, cfg: GRPOConfig, state: LoopState) -> list[Episode]:
    while True:
        groups = await call(actors.buffer, "sample", cfg.rollout.groups_per_step, state.version)
        if groups is not None:
            return [ep for group in groups for ep in group]
        await asyncio.sleep(POLL_S)


def record_batch_rewards(episodes: list[Episode], multi_turn: bool = False) -> None:
    """Reward metrics of the episodes a step trains on (raw rewards, padding copies excluded).
    ``reward/...`` are the last turn's; multi-turn adds :func:`turn_summary`'s per-turn pass rate,
    reward and fast_1 (``turn/<k>/...``), best-so-far by turn and best/last over turns."""
    real = [ep for ep in episodes if not ep.turns[0].info.get("padding")]
    if multi_turn:
        for key, value in turn_summary(real).items():
            record_metric(key, value)
    timed = False
    for ep in real:
        info = ep.turns[-1].info
        record_metric("reward/total", sum(t.info.get("raw_reward", t.reward) for t in ep.turns))
        for key in ("correct", "compiled", "extracted"):
            record_metric(f"reward/{key}", float(bool(info.get(key))))
        timed |= bool(info.get("timing_available"))
    if timed:  # fast_p (KernelBench): correct and faster than the reference by more than p
        for ep in real:
            info = ep.turns[-1].info
            speedup = info.get("speedup") or 0.0
            record_metric("reward/fast_1", float(bool(info.get("correct")) and speedup > 1.0))
            record_metric("reward/fast_1.5", float(bool(info.get("correct")) and speedup > 1.5))


class StepRunner:
    """Advantages -> train step -> publish weights -> metrics, shared by both modes."""

    def __init__(self, actors: Actors, cfg: GRPOConfig, state: LoopState, logger: MetricLogger,
                 checkpoint: Callable[[int], Awaitable[None]] | None = None) -> None:
        self.actors, self.cfg, self.state, self.logger = actors, cfg, state, logger
        self.checkpoint = checkpoint
        self.weight_sync: asyncio.Task[Any] | None = None
        self._last = time.monotonic()
        self._last_tokens = 0

    async def train(self, step: int, episodes: list[Episode]) -> dict[str, float]:
        episodes = await call(self.actors.advantages, "compute", episodes)
        record_batch_rewards(episodes, multi_turn=self.cfg.rollout.turns is not None)
        start = time.monotonic()
        metrics = await call_trainer(self.actors.trainer, "train_step", episodes)
        record_metric("perf/train_step_s", time.monotonic() - start)
        self.state.version += 1
        await self.finish_weight_sync()  # the previous version must be loaded before the next is published
        await call_trainer(self.actors.trainer, "push_weights", self.state.version)
        self.weight_sync = asyncio.ensure_future(call_all(self.actors.generator, "update_weights", self.state.version))
        for key, value in metrics.items():
            record_metric(key, value, Reduce.MAX if key.endswith("_max") else Reduce.MEAN)
        now = time.monotonic()
        tokens = self.state.generated_tokens - self._last_tokens
        record_metric("perf/gen_tokens_per_s", tokens / max(now - self._last, 1e-9))
        record_metric("perf/step_s", now - self._last)
        self._last, self._last_tokens = now, self.state.generated_tokens
        scalars = self.logger.flush(step, await collect_metric_states(*self.actors.all()))
        self.state.history.append(scalars)
        interval = self.cfg.checkpoint.interval
        if self.checkpoint is not None and interval is not None and (
                (step + 1) % interval == 0 or step + 1 == self.cfg.steps):
            await self.finish_weight_sync()  # the generators are at this version when the state is taken
            start = time.monotonic()
            await self.checkpoint(step)
            record_metric("perf/checkpoint_s", time.monotonic() - start)  # logged with the next step
        return scalars

    async def abandon_weight_sync(self) -> None:
        """Cancel a weight sync still in flight (the run is failing or interrupted)."""
        if self.weight_sync is not None:
            self.weight_sync.cancel()
            await asyncio.gather(self.weight_sync, return_exceptions=True)
            self.weight_sync = None

    async def finish_weight_sync(self) -> None:
        if self.weight_sync is not None:
            task, self.weight_sync = self.weight_sync, None
            await task


async def continuous_training(runner: StepRunner, start: int = 0) -> None:
    """Optimiser steps ``start`` .. ``steps - 1`` on batches from the buffer, then stop the rollouts."""
    try:
        for step in range(start, runner.cfg.steps):
            await runner.train(step, await _next_batch(runner.actors, runner.cfg, runner.state))
        await runner.finish_weight_sync()
    finally:
        runner.state.stop.set()


async def synchronous_steps(runner: StepRunner, start: int = 0) -> None:
    """Generate a batch at the current version, then train on it: no overlap, staleness 0
    (steps ``start`` .. ``steps - 1``)."""
    actors, cfg, state = runner.actors, runner.cfg, runner.state
    for step in range(start, cfg.steps):
        await runner.finish_weight_sync()
        while await call(actors.buffer, "num_groups") < cfg.rollout.groups_per_step:
            missing = cfg.rollout.groups_per_step - await call(actors.buffer, "num_groups")
            groups = await asyncio.gather(*(rollout_group(actors, cfg, state) for _ in range(missing)))
            for group in groups:
                await call(actors.buffer, "add", group)
        await runner.train(step, await _next_batch(actors, cfg, state))
    await runner.finish_weight_sync()
