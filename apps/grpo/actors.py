"""The GRPO app's actors: their handles (typed as their actor classes, so an editor follows
``actors.generator.generate.one(...)`` to :meth:`Generator.generate`) and how they are spawned."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from actors.advantages import ComputeAdvantages
from actors.dataset import DatasetActor
from actors.generator import Generator
from actors.reference import ReferenceModel
from actors.replay_buffer import ReplayBuffer
from actors.reward import RewardActor
from actors.trainer import Trainer
from forge_kernels.config import ConfigError
from forge_kernels.distributed import free_port
from forge_kernels.registry import resolve_class
from forge_kernels.runtime import Actor, spawn

from apps.grpo.config import GRPOConfig

__all__ = ["Actors", "actor_class", "spawn_actors"]


@dataclass
class Actors:
    """Handles of the spawned actors (``reference`` is None when not needed). A multi-process
    trainer is an SPMD group: ``trainer.<endpoint>.one(...)`` runs every rank, rank 0 answers."""

    dataset: DatasetActor
    generator: Generator
    reward: RewardActor
    advantages: ComputeAdvantages
    buffer: ReplayBuffer
    trainer: Trainer
    reference: ReferenceModel | None = None

    def all(self) -> list[Any]:
        return [h for h in (self.dataset, self.generator, self.reward, self.advantages, self.buffer,
                            self.trainer, self.reference) if h is not None]


def actor_class(cfg: GRPOConfig, name: str, default: type[Actor],
                overrides: Mapping[str, type[Actor]] | None = None) -> type[Actor]:
    """``default``, or the subclass named by ``actor_classes.<name>`` (or given in ``overrides``)."""
    cls: Any = (overrides or {}).get(name)
    if cls is None and name in cfg.actor_classes:
        try:
            cls = resolve_class(cfg.actor_classes[name], f"actor_classes.{name}", base=default)
        except ValueError as err:
            raise ConfigError(str(err)) from None
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
    # the handles stand in for their actor classes (see forge_kernels.runtime.handle)
    return Actors(**{name: cast(Any, handle) for name, handle in zip(names, handles)})
