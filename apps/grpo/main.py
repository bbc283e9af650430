"""GRPO for kernel-writing models: typed actors, two concurrent loops, weights via the tensor store.

    python -m apps.grpo.main --config configs/grpo_tiny.yaml
    python -m apps.grpo.main --config configs/grpo_tiny.yaml mode=sync steps=5 runtime.backend=monarch
    python -m apps.grpo.main --config configs/grpo_tiny.yaml model.path=runs/sft/final

``continuous_rollouts``: sample a task, roll out a group of episodes (single- or multi-turn, one
driver: :func:`forge_kernels.rollout.run_episodes`), add reference logprobs, put the group in the
buffer — forever, pausing while the buffer is full. ``continuous_training``: take a batch of
groups trainable at the current version, compute advantages, take an optimiser step, publish the
weights and have the generator load them in the background (generation pauses only for the copy).
``synchronous_steps``: the same pieces, one phase after the other (``mode: sync``).
See docs/grpo.md for the YAML keys and the metrics written per step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_kernels.checkpoint import CheckpointWriter, complete_checkpoints, find_resume_point
from forge_kernels.config import run_app, run_to_exit
from forge_kernels.metrics import ConsoleBackendConfig, MetricLogger, Reduce, get_collector, record_metric
from forge_kernels.rollout import ActorTurnBackend, TurnsConfig, batch_metrics, run_episodes, turn_summary
from forge_kernels.runtime import Actor, ActorCallError, ActorDiedError, collect_metric_states, shutdown
from forge_kernels.runtime.placement import place_actors
from forge_kernels.store import build_store
from forge_kernels.types import Episode

from apps.grpo.actors import Actors, spawn_actors
from apps.grpo.checkpointing import restore, run_fingerprint, save_checkpoint
from apps.grpo.config import GRPOConfig
from apps.grpo.model_init import resolve_model_path

__all__ = ["GRPOFailed", "LoopState", "PROGRESS_KEYS", "continuous_rollouts", "continuous_training", "main",
           "rollout_group", "run", "run_recovering", "synchronous_steps"]

log = logging.getLogger("apps.grpo")
POLL_S = 0.02
SINGLE_TURN = TurnsConfig(max_turns=1)

# the per-step progress line (console backends that name no keys of their own)
PROGRESS_KEYS = [
    "reward/total/mean", "reward/correct/mean", "reward/fast_1/mean", "loss/ref_kl/mean", "loss/entropy/mean",
    "perf/gen_tokens_per_s/mean", "train/staleness_max/max", "train/logprob_diff_max/max", "perf/step_s/mean",
]


class GRPOFailed(RuntimeError):
    """An actor failed; the run was stopped. ``history``: the metrics of the steps it finished."""

    def __init__(self, message: str, history: list[dict[str, float]] | None = None) -> None:
        super().__init__(message)
        self.history = history or []


@dataclass
class LoopState:
    """What the loops share in the controller."""

    version: int = 0  # the trainer's policy version
    generated_tokens: int = 0
    groups_in_flight: int = 0  # being rolled out right now
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    history: list[dict[str, float]] = field(default_factory=list)  # flushed scalars, one per step


# ---------------------------------------------------------------------------------------- rollouts
async def rollout_group(actors: Actors, cfg: GRPOConfig, state: LoopState) -> list[Episode]:
    """One group: ``group_size`` episodes of one task from its shared first prompt, scored, with
    reference logprobs when a reference model runs."""
    start = time.monotonic()
    sample = await actors.dataset.sample.one(state.version)
    backend = ActorTurnBackend(actors.generator, actors.reward, actors.dataset)
    episodes = await run_episodes(sample.task, sample.prompt_ids, cfg.rollout.group_size, backend,
                                  cfg.rollout.turns or SINGLE_TURN, group_id=sample.group_id,
                                  task_name=sample.task.name, response_tokens=cfg.generator.sampling.max_tokens)
    state.generated_tokens += backend.generated_tokens
    if actors.reference is not None:
        refs = await actors.reference.episode_logprobs.one(episodes)
        for ep, ref in zip(episodes, refs, strict=True):
            ep.ref_logprobs = ref
    for ep in episodes:
        record_metric(f"rollout/stop/{ep.stop_reason}", 1, Reduce.SUM)
    record_metric("perf/rollout_group_s", time.monotonic() - start)
    return episodes


async def continuous_rollouts(actors: Actors, cfg: GRPOConfig, state: LoopState) -> None:
    """Produce groups until told to stop; wait while buffered + in-flight groups reach the limit
    (each group produced beyond what training consumes only ages in the buffer)."""
    while not state.stop.is_set():
        if await actors.buffer.num_groups.one() + state.groups_in_flight >= cfg.rollout.buffered_limit:
            await asyncio.sleep(POLL_S)
            continue
        state.groups_in_flight += 1
        try:
            group = await rollout_group(actors, cfg, state)
        finally:
            state.groups_in_flight -= 1
        await actors.buffer.add.one(group)


async def next_batch(actors: Actors, cfg: GRPOConfig, state: LoopState) -> list[Episode]:
    """The episodes of ``groups_per_step`` groups trainable at the current version (waits for them)."""
    while (groups := await actors.buffer.sample.one(cfg.rollout.groups_per_step, state.version)) is None:
        await asyncio.sleep(POLL_S)
    return [ep for group in groups for ep in group]


# ---------------------------------------------------------------------------------------- training
class WeightSync:
    """Publishes each new version and has the generators load it in the background; at most one
    load is in flight (the previous version must be loaded before the next is published)."""

    def __init__(self, actors: Actors) -> None:
        self.actors = actors
        self.loading: asyncio.Task[Any] | None = None

    async def publish(self, version: int) -> None:
        await self.finish()
        await self.actors.trainer.push_weights.one(version)  # every trainer rank takes part
        self.loading = asyncio.ensure_future(self.actors.generator.update_weights.all(version))

    async def finish(self) -> None:
        """Wait until the generators hold the last published version."""
        if self.loading is not None:
            task, self.loading = self.loading, None
            await task

    async def abandon(self) -> None:
        """Cancel a load still in flight (the run is failing or interrupted)."""
        if self.loading is not None:
            self.loading.cancel()
            await asyncio.gather(self.loading, return_exceptions=True)
            self.loading = None


class StepRunner:
    """One training step, shared by both modes: :meth:`optimise`, publish the weights, :meth:`log`,
    and a checkpoint every ``checkpoint.interval`` steps."""

    def __init__(self, actors: Actors, cfg: GRPOConfig, state: LoopState, logger: MetricLogger,
                 checkpoint: Callable[[int], Awaitable[None]] | None = None) -> None:
        self.actors, self.cfg, self.state, self.logger = actors, cfg, state, logger
        self.checkpoint = checkpoint
        self.weights = WeightSync(actors)
        self._last, self._last_tokens = time.monotonic(), 0

    async def train(self, step: int, episodes: list[Episode]) -> None:
        await self.optimise(episodes)
        await self.weights.publish(self.state.version)
        await self.log(step)
        interval = self.cfg.checkpoint.interval
        if self.checkpoint is not None and interval is not None and (
                (step + 1) % interval == 0 or step + 1 == self.cfg.steps):
            await self.weights.finish()  # the generators are at this version when the state is taken
            start = time.monotonic()
            await self.checkpoint(step)
            record_metric("perf/checkpoint_s", time.monotonic() - start)  # logged with the next step

    async def optimise(self, episodes: list[Episode]) -> None:
        """Advantages, the episodes' reward metrics, one optimiser step: a new policy version."""
        episodes = await self.actors.advantages.compute.one(episodes)
        for key, values in batch_metrics(episodes).items():
            for value in values:
                record_metric(key, value)
        if self.cfg.rollout.turns is not None:
            for key, value in turn_summary(episodes).items():
                record_metric(key, value)
        start = time.monotonic()
        metrics = await self.actors.trainer.train_step.one(episodes)
        record_metric("perf/train_step_s", time.monotonic() - start)
        for key, value in metrics.items():
            record_metric(key, value, Reduce.MAX if key.endswith("_max") else Reduce.MEAN)
        self.state.version += 1

    async def log(self, step: int) -> None:
        now = time.monotonic()
        record_metric("perf/gen_tokens_per_s", (self.state.generated_tokens - self._last_tokens) / max(now - self._last, 1e-9))
        record_metric("perf/step_s", now - self._last)
        self._last, self._last_tokens = now, self.state.generated_tokens
        self.state.history.append(self.logger.flush(step, await collect_metric_states(*self.actors.all())))


async def continuous_training(runner: StepRunner, start: int = 0) -> None:
    """Optimiser steps ``start`` .. ``steps - 1`` on batches from the buffer, then stop the rollouts."""
    try:
        for step in range(start, runner.cfg.steps):
            await runner.train(step, await next_batch(runner.actors, runner.cfg, runner.state))
        await runner.weights.finish()
    finally:
        runner.state.stop.set()


async def synchronous_steps(runner: StepRunner, start: int = 0) -> None:
    """Generate a batch at the current version, then train on it: no overlap, staleness 0."""
    actors, cfg, state = runner.actors, runner.cfg, runner.state
    for step in range(start, cfg.steps):
        await runner.weights.finish()
        while (missing := cfg.rollout.groups_per_step - await actors.buffer.num_groups.one()) > 0:
            for group in await asyncio.gather(*(rollout_group(actors, cfg, state) for _ in range(missing))):
                await actors.buffer.add.one(group)
        await runner.train(step, await next_batch(actors, cfg, state))
    await runner.weights.finish()


async def overlapped_steps(runner: StepRunner, start: int = 0) -> None:
    """``rollout.loops`` rollout loops and the training loop at once; the first failure cancels all."""
    actors, cfg, state = runner.actors, runner.cfg, runner.state
    tasks = [asyncio.create_task(continuous_rollouts(actors, cfg, state), name=f"continuous_rollouts[{i}]")
             for i in range(cfg.rollout.loops)]
    trainer = asyncio.create_task(continuous_training(runner, start), name="continuous_training")
    tasks.append(trainer)
    try:
        while not trainer.done():
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: t is not trainer):  # the trainer's outcome first
                if task.exception() is not None:
                    raise task.exception()
                if task is not trainer and not state.stop.is_set():
                    raise GRPOFailed(f"{task.get_name()} ended before training finished")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------------------------- the run
async def run(cfg: GRPOConfig, classes: Mapping[str, type[Actor]] | None = None,
              restarts: int = 0) -> list[dict[str, float]]:
    """Run the app; returns the flushed metrics of every step (of this invocation: a resumed run
    returns the steps it ran). ``classes`` replaces actor classes; ``restarts`` (recoveries so
    far, see :func:`run_recovering`) is logged as ``run/restarts``."""
    cfg = place_actors(cfg)  # prints one placement line per actor; store.backend auto -> shm or torchstore
    model_path = resolve_model_path(cfg)
    fingerprint = run_fingerprint(cfg, model_path)
    resume = find_resume_point(cfg.resume, cfg.checkpoint_dir, fingerprint)
    start = 0 if resume is None else resume.step + 1
    if resume is not None:
        log.warning("resuming from %s: step %d, policy version %d", resume.path, start, resume.version)
    store = build_store(cfg.store)
    await store.initialize()  # torchstore: starts its volume and controller (shm: nothing to do)
    for key in await store.keys("weights/"):  # a previous run's versions must not be mistaken for ours
        await store.delete(key)
    backends = [b.model_copy(update={"keys": PROGRESS_KEYS}) if isinstance(b, ConsoleBackendConfig) and b.keys is None
                else b for b in cfg.metrics.backends]
    logger = MetricLogger.from_config(cfg.metrics.model_copy(update={"backends": backends}), total_steps=cfg.steps,
                                      resume_step=None if resume is None else start)
    get_collector().drain()  # values an earlier run in this process recorded but never flushed are not ours
    state = LoopState()
    actors: Actors | None = None
    runner: StepRunner | None = None
    try:
        actors = await spawn_actors(cfg, model_path, classes)
        if resume is not None:
            state.version = await restore(actors, str(resume.path))
        # the current version (0 on a fresh start, for generators restarted later too) reaches the store
        await actors.trainer.push_weights.one(state.version)
        if state.version:
            await actors.generator.update_weights.all(state.version)
        writer = None if cfg.checkpoint.interval is None else CheckpointWriter(cfg.checkpoint_dir, cfg.checkpoint.keep)
        runner = StepRunner(actors, cfg, state, logger, checkpoint=None if writer is None else
                            lambda step: save_checkpoint(actors, writer, step, state.version, fingerprint))
        if restarts:
            record_metric("run/restarts", restarts, Reduce.MAX)  # in the first row after a recovery
        await (synchronous_steps if cfg.mode == "sync" else overlapped_steps)(runner, start)
        if cfg.save_final:
            await actors.trainer.save.one(str(Path(cfg.run_dir) / "final"))
        return state.history
    except (ActorCallError, ActorDiedError) as err:
        newest = complete_checkpoints(cfg.checkpoint_dir) if cfg.checkpoint.interval is not None else []
        hint = f"; resume from {newest[-1]} (resume: auto)" if newest else ""
        raise GRPOFailed(f"GRPO stopped at policy version {state.version}: {err}{hint}", state.history) from err
    finally:
        if runner is not None:
            await runner.weights.abandon()
        if actors is not None:
            try:
                await asyncio.wait_for(actors.reward.close.one(), 30)
            except Exception as err:  # already dead or stopped: shutdown below still cleans up
                log.warning("closing the reward actor: %s", err)
        await shutdown()
        logger.close()
        for key in await store.keys("weights/"):
            await store.delete(key)
        await store.close()


async def run_recovering(cfg: GRPOConfig, classes: Mapping[str, type[Actor]] | None = None) -> list[dict[str, float]]:
    """:func:`run`, and when an actor's process dies mid-run, run again from the newest checkpoint
    (up to ``trainer.max_restarts`` times; needs ``checkpoint.interval``). Returns the metrics of
    every step, each once. A failure that is not a death, or one beyond the budget, is raised."""
    history: list[dict[str, float]] = []
    restarts = 0
    while True:
        attempt_cfg = cfg if restarts == 0 else cfg.model_copy(update={"resume": "auto"})
        point = find_resume_point(attempt_cfg.resume, cfg.checkpoint_dir, run_fingerprint(cfg, resolve_model_path(cfg)))
        start = 0 if point is None else point.step + 1
        try:
            rows = await run(attempt_cfg, classes, restarts=restarts)
            return history[:start] + rows if restarts else rows
        except GRPOFailed as err:
            died = isinstance(err.__cause__, ActorDiedError)
            if not died or cfg.checkpoint.interval is None or restarts >= cfg.trainer.max_restarts \
                    or not complete_checkpoints(cfg.checkpoint_dir):
                if died and restarts >= cfg.trainer.max_restarts:
                    raise GRPOFailed(f"{err} (after {restarts} recoveries: trainer.max_restarts="
                                     f"{cfg.trainer.max_restarts})") from err.__cause__
                raise
            history = history[:start] + err.history
            restarts += 1
            log.warning("an actor died (%s); recovery %d/%d: resuming from the newest checkpoint",
                        err.__cause__, restarts, cfg.trainer.max_restarts)


def main(cfg: GRPOConfig) -> list[dict[str, float]]:
    """Entry point: run, and turn failures and Ctrl-C into clear messages and exit codes."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if cfg.torch_threads is not None:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    return run_to_exit(run_recovering(cfg), GRPOFailed, "interrupted: actors stopped, run directory kept")


if __name__ == "__main__":
    run_app(GRPOConfig, main, description=__doc__)
