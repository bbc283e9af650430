"""The starting checkpoint: the configured directory, or a tiny model + tokenizer built and saved."""

from __future__ import annotations

from pathlib import Path

from forge_kernels.env.base import build_environment
from forge_kernels.models.real_shapes import build_random_init_checkpoint
from forge_kernels.models.tiny import build_tiny_checkpoint

from apps.grpo.config import GRPOConfig

__all__ = ["resolve_model_path"]


def resolve_model_path(cfg: GRPOConfig) -> str:
    """``model.path`` if set (checked), otherwise build a tiny model (or, with ``model.random_init``, a
    real architecture with random weights) into ``run_dir/init_model``."""
    if cfg.model.path is not None and cfg.model.random_init is not None:
        raise ValueError(f"model.path={cfg.model.path!r} and model.random_init={cfg.model.random_init!r} both set: "
                         f"give a checkpoint or a random-init architecture, not both")
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
    if cfg.model.random_init is not None:
        device = cfg.trainer.device if cfg.trainer.device.startswith("cuda") else "cpu"
        return build_random_init_checkpoint(cfg.model.random_init, corpus, Path(cfg.run_dir) / "init_model",
                                            tokenizer_vocab=cfg.model.vocab_size, device=device, seed=cfg.seed)
    return build_tiny_checkpoint(corpus, cfg.model.tiny, cfg.model.vocab_size, Path(cfg.run_dir) / "init_model")
