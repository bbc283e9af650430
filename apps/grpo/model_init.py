"""The starting checkpoint: the configured directory, or a tiny model + tokenizer built and saved."""

from __future__ import annotations

from pathlib import Path

from forge_kernels.env.prompts import SYSTEM_PROMPT, task_messages
from forge_kernels.models.tiny import build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.tasks import load_tasks

from apps.grpo.config import GRPOConfig

__all__ = ["resolve_model_path"]


def resolve_model_path(cfg: GRPOConfig) -> str:
    """``model.path`` if set (checked), otherwise build a tiny model into ``run_dir/init_model``."""
    if cfg.model.path is not None:
        path = Path(cfg.model.path).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"model.path={cfg.model.path!r} is not a Hugging Face checkpoint directory (no config.json); "
                f"give an SFT output directory or leave model.path unset to build a tiny model"
            )
        return str(path)
    tasks = load_tasks(cfg.dataset.tasks)
    corpus = [SYSTEM_PROMPT]
    for task in tasks:
        corpus += [m["content"] for m in task_messages(task, cfg.dataset.prompt)]
        if task.solution:
            corpus.append(task.solution)
    tokenizer = train_tokenizer(corpus, vocab_size=cfg.model.vocab_size)
    model = build_tiny_model(cfg.model.tiny, tokenizer)
    return str(save_checkpoint(model, tokenizer, Path(cfg.run_dir) / "init_model"))
