"""GRPO for kernel-writing models: typed actors, two concurrent loops, weights via the tensor store.

    python -m apps.grpo.main --config configs/grpo_tiny.yaml
    python -m apps.grpo.main --config configs/grpo_tiny.yaml mode=sync steps=5 runtime.backend=monarch
    python -m apps.grpo.main --config configs/grpo_tiny.yaml model.path=runs/sft/final

See docs/grpo.md for the YAML keys and the metrics written per step.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.advantages import ComputeAdvantages
from actors.dataset import DatasetActor
from actors.generator import Generator
from actors.reference import ReferenceModel
from actors.replay_buffer import ReplayBuffer
from actors.reward import RewardActor
from actors.trainer import Trainer
from forge_kernels.checkpoint import CheckpointWriter, complete_checkpoints, find_resume_point
from forge_kernels.config import ConfigError, run_app, run_to_exit
from forge_kernels.metrics import ConsoleBackendConfig, MetricLogger, Reduce, get_collector, record_metric
from forge_kernels.runtime import Actor, ActorCallError, ActorDiedError, shutdown, spawn
from forge_kernels.distributed import free_port
from forge_kernels.runtime.placement import place_actors
from forge_kernels.store import build_store

from apps.grpo.config import GRPOConfig
from apps.grpo.loops import (
    Actors,
    LoopState,
    StepRunner,
    call,
    call_all,
    call_trainer,
    continuous_rollouts,
    continuous_training,
    synchronous_steps,
)
from apps.grpo.model_init import resolve_model_path

__all__ = ["GRPOFailed", "PROGRESS_KEYS", "main", "run", "run_recovering"]

log = logging.getLogger("apps.grpo")

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


def actor_class(cfg: GRPOConfig, name: str, default: type[Actor],
                overrides: Mapping[str, type[Actor]] | None = None) -> type[Actor]:
    """``default``, or the subclass named by ``actor_classes.<name>`` (or given in ``overrides``)."""
    cls: Any = (overrides or {}).get(name)
    if cls is None and name in cfg.actor_classes:
        spec = cfg.actor_classes[name]
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ConfigError(f"actor_classes.{name}={spec!r}: expected 'package.module:ClassName'")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise ConfigError(f"actor_classes.{name}={spec!r} cannot be imported: {err}") from None
    if cls is None:
        return default
    if not (isinstance(cls, type) and issubclass(cls, default)):
        raise ConfigError(f"actor_classes.{name}: {cls!r} is not a subclass of {default.__name__}")
    return cls


async def spawn_actors(cfg: GRPOConfig, model_path: str,
                       classes: Mapping[str, type[Actor]] | None = None) -> Actors:
    """Spawn every actor with its YAML section, the shared model path, store and environment."""
    shared = {"model_path": model_path}
    loss = cfg.trainer.loss
    specs = {
        "dataset": (DatasetActor, cfg.dataset.model_copy(update={**shared, "env": cfg.env})),
        "generator": (Generator, cfg.generator.model_copy(update={**shared, "store": cfg.store})),
        "reward": (RewardActor, cfg.reward.model_copy(update={"env": cfg.env})),
        "advantages": (ComputeAdvantages, cfg.advantages.model_copy(update={"estimator": loss.advantage_estimator})),
        "buffer": (ReplayBuffer, cfg.buffer),
        "trainer": (Trainer, cfg.trainer.model_copy(update={
            **shared, "store": cfg.store,
            "master_port": cfg.trainer.master_port or (free_port() if cfg.runtime_for("trainer").procs > 1 else None)})),
    }
    if cfg.reference_enabled:
        specs["reference"] = (ReferenceModel, cfg.reference.model_copy(
            update={**shared, "temperature": loss.temperature}))
    names = list(specs)
    # a subclass's Config may add fields (with defaults): the section is re-validated into it
    resolved = {name: actor_class(cfg, name, cls, classes) for name, (cls, _) in specs.items()}
    handles = await asyncio.gather(*(
        spawn(resolved[name], conf.model_dump(), cfg.runtime_for(name)) for name, (_, conf) in specs.items()
    ))
    return Actors(**dict(zip(names, handles)))


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
        await call_trainer(actors.trainer, "push_weights", state.version)
        if state.version:
            await call_all(actors.generator, "update_weights", state.version)
        writer = None if cfg.checkpoint.interval is None else CheckpointWriter(cfg.checkpoint_dir, cfg.checkpoint.keep)
        runner = StepRunner(actors, cfg, state, logger, checkpoint=None if writer is None else
                            lambda step: save_checkpoint(actors, writer, step, state.version, fingerprint))
        if restarts:
            record_metric("run/restarts", restarts, Reduce.MAX)  # in the first row after a recovery
        if cfg.mode == "sync":
            await synchronous_steps(runner, start)
        else:
            await _run_async(actors, cfg, state, runner, start)
        if cfg.save_final:
            await call_trainer(actors.trainer, "save", str(Path(cfg.run_dir) / "final"))
        return state.history
    except (ActorCallError, ActorDiedError) as err:
        hint = ""
        if cfg.checkpoint.interval is not None:
            newest = complete_checkpoints(cfg.checkpoint_dir)
            hint = f"; resume from {newest[-1]} (resume: auto)" if newest else ""
        raise GRPOFailed(f"GRPO stopped at policy version {state.version}: {err}{hint}", state.history) from err
    finally:
        if runner is not None:
            await runner.abandon_weight_sync()
        if actors is not None:
            try:
                await asyncio.wait_for(call(actors.reward, "close"), 30)
            except Exception as err:  # already dead or stopped: shutdown below still cleans up
                log.warning("closing the reward actor: %s", err)
        await shutdown()
        logger.close()
        for key in await store.keys("weights/"):
            await store.delete(key)
        await store.close()


def run_fingerprint(cfg: GRPOConfig, model_path: str) -> dict[str, Any]:
    """What a checkpoint must share with this run to be resumed by it: the model's shape, the
    loss and the trainer's world size."""
    model = json.loads((Path(model_path) / "config.json").read_text())
    shape = {k: model.get(k) for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "intermediate_size")}
    return {"model": shape, "loss": type(cfg.trainer.loss).loss_name, "trainer_procs": cfg.runtime_for("trainer").procs,
            "trainer_engine": cfg.trainer.engine}


async def save_checkpoint(actors: Actors, writer: CheckpointWriter, step: int, version: int,
                          fingerprint: dict[str, Any]) -> None:
    """Every stateful actor writes its part into a fresh directory, then it is committed at once."""
    path = str(writer.begin(step))
    await call_all(actors.trainer, "save_state", path)
    await call(actors.dataset, "save_state", path)
    await call_all(actors.generator, "save_state", path)
    await call(actors.buffer, "save_state", path)
    writer.commit(version, fingerprint)


async def restore(actors: Actors, path: str) -> int:
    """Load a checkpoint into the freshly spawned actors; returns its policy version."""
    versions = await call_all(actors.trainer, "load_state", path)
    await call(actors.dataset, "load_state", path)
    await call_all(actors.generator, "load_state", path)
    await call(actors.buffer, "load_state", path)
    return versions[0]


async def _run_async(actors: Actors, cfg: GRPOConfig, state: LoopState, runner: StepRunner, start: int = 0) -> None:
    """N rollout loops and one training loop; the first failure cancels everything."""
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


def main(cfg: GRPOConfig) -> list[dict[str, float]]:
    """Entry point: run, and turn failures and Ctrl-C into clear messages and exit codes."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if cfg.torch_threads is not None:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    return run_to_exit(run_recovering(cfg), GRPOFailed, "interrupted: actors stopped, run directory kept")


if __name__ == "__main__":
    run_app(GRPOConfig, main, description=__doc__)
