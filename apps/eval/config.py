"""The eval app's YAML schema: the policy to evaluate, the tasks, k samples, scoring and outputs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from actors.generator import Generator
from forge_kernels.config import StrictModel
from forge_kernels.env.base import EnvSpec
from forge_kernels.rollout.episodes import TurnsConfig
from apps.eval.report import DEFAULT_FAST_P
from forge_kernels.models.tiny import TinyModelConfig

__all__ = ["ContextSection", "EvalAppConfig", "OutputSection", "PolicySection"]


class PolicySection(StrictModel):
    """What writes the kernels.

    ``source: generator`` samples from a model through the Generator actor: ``generator.engine``
    ``hf`` (a checkpoint in this process), ``vllm`` (vLLM's engine) or ``openai`` (an
    OpenAI-compatible server; ``path`` then names the served model's tokenizer checkpoint).
    ``source: solutions`` answers every task with its shipped reference solution: a sanity check of
    the evaluation pipeline on a new machine, and the built-in tasks' speedup ceiling as shipped.
    """

    source: Literal["generator", "solutions"] = "generator"
    path: str | None = Field(
        default=None, description="HF checkpoint dir (model + tokenizer); unset: build a tiny model (hf, vllm)")
    tiny: TinyModelConfig = TinyModelConfig()
    vocab_size: int = Field(default=1024, ge=300, description="BPE vocabulary of a built tiny model")
    generator: Generator.Config = Generator.Config()

    @model_validator(mode="after")
    def _consistent(self) -> PolicySection:
        if self.generator.model_path:
            raise ValueError(f"policy.generator.model_path={self.generator.model_path!r}: set policy.path instead "
                             f"(the app fills the generator's model_path in)")
        if self.source == "generator" and self.generator.engine == "openai" and self.path is None:
            raise ValueError("policy.generator.engine=openai needs policy.path: the checkpoint directory holding the "
                             "served model's tokenizer (prompts are sent as token ids)")
        return self


class ContextSection(StrictModel):
    """What later turns see (multi-turn only).

    ``stts``: the first prompt plus the ``window`` highest-reward earlier turns (reply + feedback),
    in order — Dr. Kernel's test-time context management, so episodes can run more turns than
    training used. ``full``: every earlier turn (the training context; grows with each turn).
    """

    kind: Literal["stts", "full"] = "stts"
    window: int = Field(default=4, ge=0, description="STTS: earlier turns kept in the prompt")


class OutputSection(StrictModel):
    """Where results go (relative paths are under ``run_dir``)."""

    report: str = Field(default="report.json", description="the JSON report")
    plot: str | None = Field(default="turns.png", description="per-turn curves (PNG); null: no plot")
    samples: bool = Field(default=True, description="include every sample's record in the JSON report")


class EvalAppConfig(StrictModel):
    """Everything ``python -m apps.eval.main --config ...`` reads."""

    seed: int = 0
    run_dir: str = Field(default="runs/eval", description="outputs, and the tiny model when one is built")
    torch_threads: int | None = Field(default=None, ge=1, description="intra-op threads of this process")
    env: EnvSpec = Field(default_factory=EnvSpec,
                         description="the environment: its tasks, prompts and scoring (env.config.tasks picks the "
                                     "task set: built-in or a KernelBench checkout by path)")
    samples_per_task: int = Field(default=4, ge=1, description="k: samples drawn per task")
    pass_k: list[int] | None = Field(default=None, description="k values of pass@k (default: 1 and samples_per_task)")
    fast_p: list[float] = Field(default_factory=lambda: list(DEFAULT_FAST_P), description="thresholds p of fast_p")
    turns: TurnsConfig = Field(default_factory=TurnsConfig,
                               description="max_turns (1: single-turn), max_context_tokens, stop_on (done|never)")
    context: ContextSection = ContextSection()
    max_concurrent_tasks: int = Field(default=4, ge=1, description="tasks sampled and scored at once")
    eval_concurrency: int = Field(default=2, ge=1, description="environment steps (evaluations) in flight at once")
    policy: PolicySection = PolicySection()
    output: OutputSection = OutputSection()

    @model_validator(mode="after")
    def _consistent(self) -> EvalAppConfig:
        if self.pass_k is not None:
            bad = [k for k in self.pass_k if not 1 <= k <= self.samples_per_task]
            if bad:
                raise ValueError(f"pass_k {bad}: each k must be between 1 and samples_per_task={self.samples_per_task}")
        if any(p < 0 for p in self.fast_p):
            raise ValueError(f"fast_p thresholds must be >= 0, got {self.fast_p}")
        if self.policy.source == "solutions" and self.turns.max_turns > 1:
            raise ValueError(f"policy.source=solutions gives the same answer every turn; use turns.max_turns=1 "
                             f"(got {self.turns.max_turns})")
        return self
