"""Real model architectures with random weights, for measuring the system at real sizes.

No weights can be downloaded here and none are needed to measure throughput, memory or weight
sync: ``model.random_init: qwen3-8b`` builds Qwen3 with the published dimensions (from each
release's ``config.json``) and the real vocabulary size, 151,936. The project's own tokenizer
(trained on the task corpus, a few thousand ids) is kept; the embedding and LM-head rows past it
exist only so that every matrix has its real shape (ids past the tokenizer decode to nothing).

These models are NOT for learning: their weights are random, so their completions are noise and
their rewards say nothing about a recipe. Use them for benchmarks and scale tests only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from forge_kernels.models.tiny import save_checkpoint, train_tokenizer

__all__ = ["REAL_SHAPES", "RealShape", "RealShapeName", "real_shape_config", "build_random_init_checkpoint",
           "parameter_count"]

RealShapeName = Literal["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"]
REAL_VOCAB = 151_936


@dataclass(frozen=True)
class RealShape:
    """The dimensions of one published Qwen3 release (its config.json)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    tie_word_embeddings: bool
    head_dim: int = 128
    vocab_size: int = REAL_VOCAB
    max_position_embeddings: int = 40_960
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6


REAL_SHAPES: dict[str, RealShape] = {
    "qwen3-0.6b": RealShape(1024, 3072, 28, 16, 8, tie_word_embeddings=True),
    "qwen3-1.7b": RealShape(2048, 6144, 28, 16, 8, tie_word_embeddings=True),
    "qwen3-4b": RealShape(2560, 9728, 36, 32, 8, tie_word_embeddings=True),
    "qwen3-8b": RealShape(4096, 12288, 36, 32, 8, tie_word_embeddings=False),
    "qwen3-14b": RealShape(5120, 17408, 40, 40, 8, tie_word_embeddings=False),
    "qwen3-32b": RealShape(5120, 25600, 64, 64, 8, tie_word_embeddings=False),
}


def _shape(name: str) -> RealShape:
    try:
        return REAL_SHAPES[name]
    except KeyError:
        raise ValueError(f"model.random_init={name!r} is not a known architecture; expected one of "
                         f"{sorted(REAL_SHAPES)}") from None


def parameter_count(name: str) -> int:
    """Parameters of architecture ``name``, counted from its dimensions (embeddings included once
    when tied)."""
    s = _shape(name)
    q, kv = s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim
    attention = s.hidden_size * (q + 2 * kv) + q * s.hidden_size + 2 * s.head_dim  # q/k/v/o + q/k norms
    mlp = 3 * s.hidden_size * s.intermediate_size
    layer = attention + mlp + 2 * s.hidden_size  # two RMSNorms
    embeddings = s.vocab_size * s.hidden_size * (1 if s.tie_word_embeddings else 2)
    return s.num_hidden_layers * layer + embeddings + s.hidden_size  # final norm


def real_shape_config(name: str, pad_token_id: int, eos_token_id: int):
    """A ``transformers.Qwen3Config`` with the published dimensions of ``name``."""
    from transformers import Qwen3Config

    s = _shape(name)
    return Qwen3Config(
        vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_hidden_layers, num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads, head_dim=s.head_dim,
        max_position_embeddings=s.max_position_embeddings, rope_theta=s.rope_theta, rms_norm_eps=s.rms_norm_eps,
        tie_word_embeddings=s.tie_word_embeddings, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
        bos_token_id=None, torch_dtype="bfloat16",
    )


def build_random_init_checkpoint(name: str, corpus: Iterable[str], path: str | Path, *, tokenizer_vocab: int = 2048,
                                 device: str = "cpu", seed: int = 0) -> str:
    """Train the project's tokenizer on ``corpus``, build architecture ``name`` with random bf16
    weights (seeded) on ``device`` and save both under ``path`` in Hugging Face format.

    Building on a GPU (``device="cuda"``) is much faster for the large shapes; the weights are
    written as bf16 safetensors (an 8B shape is ~16 GB on disk).
    """
    import torch
    from transformers import Qwen3ForCausalLM

    tokenizer = train_tokenizer(corpus, vocab_size=tokenizer_vocab)
    config = real_shape_config(name, tokenizer.pad_token_id, tokenizer.eos_token_id)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # build in bf16 directly: an 8B shape in fp32 is 33 GB
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return str(save_checkpoint(model, tokenizer, path))
