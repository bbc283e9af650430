"""Policy sources of the eval app: a model behind the Generator actor, or the tasks' shipped solutions.

Both answer ``generate(task, prompts, n) -> list[Completion]``: prompt token ids in (rendered by
the checkpoint's chat template through :class:`ConversationTokens`), ``n`` completions per prompt
out, prompt-major.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from actors.generator import Generator
from forge_kernels.config import ConfigError
from forge_kernels.env.base import Environment
from forge_kernels.models.tiny import build_tiny_checkpoint
from forge_kernels.runtime import RuntimeConfig, spawn
from forge_kernels.store import StoreConfig
from forge_kernels.types import Completion

from apps.eval.config import EvalAppConfig

__all__ = ["GeneratorPolicy", "Policy", "SolutionsPolicy", "resolve_model_path"]


class Policy(Protocol):
    """What the eval app samples replies from."""

    name: str

    async def generate(self, task: Any, prompts: list[list[int]], n: int) -> list[Completion]: ...

    async def close(self) -> None: ...


def resolve_model_path(cfg: EvalAppConfig, env: Environment, tasks: list[Any]) -> str:
    """``policy.path`` (checked), or a tiny model + tokenizer trained on the environment's prompts
    (and solutions), built the way the GRPO app builds its starting model, in ``run_dir/init_model``."""
    if cfg.policy.path is not None:
        path = Path(cfg.policy.path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"policy.path={cfg.policy.path!r} is not a Hugging Face checkpoint directory "
                              f"(no config.json); give a checkpoint (e.g. SFT or GRPO output) or leave it unset "
                              f"to build a tiny model")
        return str(path)
    return build_tiny_checkpoint(env.tokenizer_corpus(tasks), cfg.policy.tiny, cfg.policy.vocab_size,
                                 Path(cfg.run_dir) / "init_model")


class GeneratorPolicy:
    """A model sampled through a locally spawned Generator actor (engine hf, vllm or openai)."""

    def __init__(self, handle: Any, engine: str, model_path: str) -> None:
        self.handle = handle
        self.name = f"{engine}:{model_path}"

    @classmethod
    async def start(cls, cfg: EvalAppConfig, model_path: str) -> GeneratorPolicy:
        gen = cfg.policy.generator.model_copy(update={
            "model_path": model_path,
            # a frozen policy: nothing is pushed, the store only has to exist for the actor's setup
            "store": StoreConfig(namespace="eval_app")})
        handle = await spawn(Generator, gen.model_dump(), RuntimeConfig(backend="local"))
        return cls(handle, gen.engine, model_path)

    async def generate(self, task: Any, prompts: list[list[int]], n: int) -> list[Completion]:
        return await self.handle.generate.one(prompts, n)

    async def close(self) -> None:
        await self.handle.close.one()


class SolutionsPolicy:
    """Answers each task with its shipped reference solution (every sample the same)."""

    name = "solutions"

    def __init__(self, tasks: list[Any]) -> None:
        missing = [t.name for t in tasks if not getattr(t, "solution", None)]
        if missing:
            raise ConfigError(f"policy.source=solutions needs tasks with a reference solution; these have none: "
                              f"{missing[:8]}{' ...' if len(missing) > 8 else ''} (KernelBench tasks ship none)")

    async def generate(self, task: Any, prompts: list[list[int]], n: int) -> list[Completion]:
        text = f"```python\n{task.solution.strip()}\n```"
        return [Completion(prompt_ids=list(p), token_ids=[], text=text, logprobs=[], policy_version=0)
                for p in prompts for _ in range(n)]

    async def close(self) -> None:
        return None
