"""The GRPO app's YAML schema: the environment, one section per actor, the loop, model, runtime, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from actors.advantages import ComputeAdvantages
from actors.dataset import DatasetActor
from actors.generator import Generator
from actors.reference import ReferenceModel
from actors.replay_buffer import ReplayBuffer
from actors.reward import RewardActor
from actors.trainer import Trainer
from forge_kernels.checkpoint import CheckpointConfig
from forge_kernels.config import StrictModel
from forge_kernels.env.base import EnvSpec
from forge_kernels.rollout.episodes import TurnsConfig
from forge_kernels.metrics import MetricsConfig
from forge_kernels.models.real_shapes import RealShapeName
from forge_kernels.models.tiny import TinyModelConfig
from forge_kernels.runtime import RuntimeConfig
from forge_kernels.store import StoreConfig

__all__ = ["ActorName", "GRPOConfig", "ModelSection", "RolloutSection"]

ActorName = Literal["dataset", "generator", "reference", "reward", "advantages", "buffer", "trainer"]


class ModelSection(StrictModel):
    """Where the policy starts: a checkpoint directory, or a tiny model built from config."""

    path: str | None = Field(default=None, description="HF checkpoint dir (model + tokenizer), e.g. SFT output")
    random_init: RealShapeName | None = Field(
        default=None, description="a real architecture with random bf16 weights (qwen3-1.7b, qwen3-8b, ...): for "
                                  "benchmarks and scale tests only, never for learning (forge_kernels.models.real_shapes)")
    tiny: TinyModelConfig = TinyModelConfig()
    vocab_size: int = Field(default=1024, ge=300, description="BPE vocabulary trained on the task corpus")


class RolloutSection(StrictModel):
    """How rollouts feed the trainer."""

    group_size: int = Field(default=4, ge=1, description="completions per prompt (one group)")
    groups_per_step: int = Field(default=2, ge=1, description="groups in one training batch")
    loops: int = Field(default=2, ge=1, description="concurrent continuous_rollouts tasks (async mode)")
    max_buffered_groups: int | None = Field(
        default=None, ge=1,
        description="rollouts pause while buffered + in-flight groups reach this (default groups_per_step)",
    )
    turns: TurnsConfig | None = Field(
        default=None,
        description="multi-turn episodes {max_turns, max_context_tokens, stop_on}: the environment's feedback "
                    "opens each next turn (null: single-turn); discount and per-turn grouping: advantages.gamma, "
                    "advantages.per_turn",
    )

    @property
    def buffered_limit(self) -> int:
        return self.max_buffered_groups or self.groups_per_step


class GRPOConfig(StrictModel):
    """Everything ``python -m apps.grpo.main --config ...`` reads."""

    seed: int = 0
    mode: Literal["async", "sync"] = Field(default="async", description="overlapped loops, or generate then train")
    steps: int = Field(default=10, ge=1, description="optimiser steps")
    run_dir: str = Field(default="runs/grpo", description="initial model (if built) and the final checkpoint")
    save_final: bool = Field(default=True, description="save the trained model to run_dir/final")
    checkpoint: CheckpointConfig = CheckpointConfig()
    resume: str = Field(default="auto", min_length=1,
                        description="auto (the newest complete checkpoint in checkpoint.dir, if any), never, "
                                    "or the path of one checkpoint (must exist and match this configuration)")
    torch_threads: int | None = Field(default=None, ge=1, description="intra-op threads of this process")
    use_reference: bool | None = Field(
        default=None, description="spawn the reference model (null: only when trainer.loss.beta > 0)"
    )
    env: EnvSpec = Field(default_factory=EnvSpec,
                         description="the task family: {name: triton | 'pkg.mod:Class', config: {...}}")
    model: ModelSection = ModelSection()
    rollout: RolloutSection = RolloutSection()
    dataset: DatasetActor.Config = DatasetActor.Config()
    generator: Generator.Config = Generator.Config()
    reference: ReferenceModel.Config = ReferenceModel.Config()
    reward: RewardActor.Config = RewardActor.Config()
    advantages: ComputeAdvantages.Config = ComputeAdvantages.Config()
    buffer: ReplayBuffer.Config = ReplayBuffer.Config()
    trainer: Trainer.Config = Trainer.Config()
    store: StoreConfig = StoreConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    runtime_overrides: dict[ActorName, dict[str, Any]] = Field(
        default_factory=dict, description="per-actor RuntimeConfig fields, e.g. {generator: {replicas: 2}}"
    )
    actor_classes: dict[ActorName, str] = Field(
        default_factory=dict,
        description="replace an actor by a subclass, 'package.module:ClassName' (importable by every process)",
    )
    metrics: MetricsConfig = MetricsConfig()

    @model_validator(mode="after")
    def _consistent(self) -> GRPOConfig:
        loss = self.trainer.loss
        temperature = self.generator.sampling.temperature
        if temperature > 0 and abs(loss.temperature - temperature) > 1e-9:
            raise ValueError(
                f"trainer.loss.temperature ({loss.temperature}) must equal generator.sampling.temperature "
                f"({temperature}): the trainer must score the distribution the generator sampled from"
            )
        if "estimator" in self.advantages.model_fields_set and self.advantages.estimator != loss.advantage_estimator:
            raise ValueError(
                f"advantages.estimator={self.advantages.estimator!r} but loss {loss.loss_name!r} needs "
                f"{loss.advantage_estimator!r}; leave advantages.estimator unset"
            )
        if self.use_reference is False and loss.beta > 0:
            raise ValueError(f"use_reference is false but trainer.loss.beta={loss.beta} needs reference logprobs")
        for name in self.runtime_overrides:
            self.runtime_for(name)  # bad override fields fail at load time
        trainer = self.runtime_for("trainer")
        if trainer.procs > 1 and (trainer.backend != "monarch" or trainer.replicas > 1 or trainer.service):
            raise ValueError(f"a trainer of procs={trainer.procs} ranks needs backend: monarch (one process per "
                             f"rank) and one replica; got backend={trainer.backend!r}, replicas={trainer.replicas}")
        return self

    @property
    def checkpoint_dir(self) -> str:
        """Where checkpoints are written and ``resume: auto`` looks."""
        return self.checkpoint.dir or str(Path(self.run_dir) / "checkpoints")

    @property
    def reference_enabled(self) -> bool:
        return self.use_reference if self.use_reference is not None else self.trainer.loss.beta > 0

    def runtime_for(self, actor: ActorName) -> RuntimeConfig:
        """The global ``runtime`` section with this actor's overrides applied."""
        return RuntimeConfig.model_validate(
            {**self.runtime.model_dump(exclude_unset=True), **self.runtime_overrides.get(actor, {})}
        )
