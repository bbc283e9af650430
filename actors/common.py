"""What several actors share: loading a Hugging Face checkpoint and pinning torch's threads."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # actors load checkpoints often; bars would bury the progress line

__all__ = ["load_model", "load_tokenizer", "set_torch_threads"]


def _checkpoint_dir(path: str) -> Path:
    if not path:
        raise ValueError("model_path is empty: give the actor a Hugging Face checkpoint directory")
    root = Path(path).expanduser()
    if not (root / "config.json").is_file():
        raise FileNotFoundError(
            f"model path {str(root)!r} is not a Hugging Face checkpoint directory (no config.json); "
            f"expected the output of save_checkpoint / save_pretrained"
        )
    return root


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved beside the model in ``path``."""
    return AutoTokenizer.from_pretrained(_checkpoint_dir(path))


def load_model(path: str, dtype: str = "float32") -> PreTrainedModel:
    """A causal LM from a local checkpoint directory (never the hub)."""
    return AutoModelForCausalLM.from_pretrained(_checkpoint_dir(path), dtype=getattr(torch, dtype))


def set_torch_threads(threads: int | None) -> None:
    """Limit torch's intra-op threads in this process (None keeps torch's default)."""
    if threads is not None:
        torch.set_num_threads(threads)
