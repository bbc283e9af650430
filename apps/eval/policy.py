"""Policy sources of the eval app: a model behind the Generator actor, or the tasks' shipped solutions.

Both answer ``generate(task, prompt_ids, n) -> list[Completion]``: the prompt's token ids (rendered
through the checkpoint's chat template by :func:`tokenize_prompts`) in, ``n`` completions out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from actors.common import load_tokenizer
from actors.generator import Generator
from forge_kernels.config import ConfigError
from forge_kernels.env.prompts import SYSTEM_PROMPT, ChatMessage, task_messages
from forge_kernels.models.tiny import build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.runtime import RuntimeConfig, spawn
from forge_kernels.store import StoreConfig
from forge_kernels.tasks import Task
from forge_kernels.types import Completion

from apps.eval.config import EvalAppConfig

__all__ = ["GeneratorPolicy", "Policy", "SolutionsPolicy", "build_policy", "resolve_model_path", "tokenize_prompts"]


class Policy(Protocol):
    """What the eval app samples kernels from."""

    name: str

    async def generate(self, task: Task, prompt_ids: list[int], n: int) -> list[Completion]: ...

    async def close(self) -> None: ...


def resolve_model_path(cfg: EvalAppConfig, tasks: list[Task]) -> str:
    """``policy.path`` (checked), or a tiny model + tokenizer trained on the tasks' prompts, built
    the way the GRPO app builds its starting model, saved under ``run_dir/init_model``."""
    if cfg.policy.path is not None:
        path = Path(cfg.policy.path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"policy.path={cfg.policy.path!r} is not a Hugging Face checkpoint directory "
                              f"(no config.json); give a checkpoint (e.g. SFT or GRPO output) or leave it unset "
                              f"to build a tiny model")
        return str(path)
    corpus = [SYSTEM_PROMPT]
    for task in tasks:
        corpus += [m["content"] for m in task_messages(task, cfg.prompt)]
        if task.solution:
            corpus.append(task.solution)
    tokenizer = train_tokenizer(corpus, vocab_size=cfg.policy.vocab_size)
    model = build_tiny_model(cfg.policy.tiny, tokenizer)
    return str(save_checkpoint(model, tokenizer, Path(cfg.run_dir) / "init_model"))


def tokenize_prompts(model_path: str, tasks: list[Task], cfg: EvalAppConfig) -> dict[str, list[int]]:
    """Each task's first-turn prompt as token ids, through the checkpoint's chat template."""
    tokenizer = load_tokenizer(model_path)
    prompts = {}
    for task in tasks:
        messages: list[ChatMessage] = task_messages(task, cfg.prompt)
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        prompts[task.name] = list(ids)
    return prompts


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

    async def generate(self, task: Task, prompt_ids: list[int], n: int) -> list[Completion]:
        return await self.handle.generate.call_one([prompt_ids], n)

    async def close(self) -> None:
        await self.handle.close.call_one()


class SolutionsPolicy:
    """Answers each task with its shipped reference solution (every sample the same)."""

    name = "solutions"

    def __init__(self, tasks: list[Task]) -> None:
        missing = [t.name for t in tasks if not t.solution]
        if missing:
            raise ConfigError(f"policy.source=solutions needs tasks with a reference solution; these have none: "
                              f"{missing[:8]}{' ...' if len(missing) > 8 else ''} (KernelBench tasks ship none)")

    async def generate(self, task: Task, prompt_ids: list[int], n: int) -> list[Completion]:
        assert task.solution is not None  # checked in __init__
        text = f"```python\n{task.solution.strip()}\n```"
        return [Completion(prompt_ids=list(prompt_ids), token_ids=[], text=text, logprobs=[], policy_version=0)
                for _ in range(n)]

    async def close(self) -> None:
        return None


async def build_policy(cfg: EvalAppConfig, tasks: list[Task]) -> tuple[Policy, dict[str, list[int]]]:
    """The configured policy and every task's prompt ids (empty prompts for ``solutions``)."""
    if cfg.policy.source == "solutions":
        return SolutionsPolicy(tasks), {t.name: [] for t in tasks}
    model_path = resolve_model_path(cfg, tasks)
    prompts = tokenize_prompts(model_path, tasks, cfg)
    return await GeneratorPolicy.start(cfg, model_path), prompts
