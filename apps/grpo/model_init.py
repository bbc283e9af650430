"""The starting checkpoint: the configured directory, or a tiny model + tokenizer built and saved."""

from __future__ import annotations

from pathlib import Path

from forge_kernels.env.base import build_environment
from forge_kernels.models.tiny import build_tiny_checkpoint

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
    env = build_environment(cfg.env)
    corpus = env.tokenizer_corpus(env.load_tasks())
    return build_tiny_checkpoint(corpus, cfg.model.tiny, cfg.model.vocab_size, Path(cfg.run_dir) / "init_model")
