"""A tokenizer trained on the task corpus and a tiny Qwen3-architecture model built from a config.

Nothing is downloaded: the CPU demo and the tests train a byte-level BPE tokenizer on the texts
they will see (task sources, solutions, prompts) and build a randomly initialised Qwen3 model.
``head_dim`` stays 64 because vLLM's CPU attention rejects smaller heads (DESIGN.md). Both are
saved in Hugging Face format, so every engine (transformers, vLLM, TorchTitan's adapter) loads
them from a directory like any checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import Field
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from forge_kernels.config import StrictModel

__all__ = ["TinyModelConfig", "CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tiny_checkpoint", "build_tiny_model",
           "train_tokenizer"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# ChatML, as Qwen models use it; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` (any text round-trips exactly)."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (bytes + specials), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


class TinyModelConfig(StrictModel):
    """Shape of a tiny Qwen3 model (the defaults give ~0.5M parameters plus embeddings)."""

    hidden_size: int = Field(default=128, ge=16)
    intermediate_size: int = Field(default=256, ge=16)
    num_hidden_layers: int = Field(default=2, ge=1)
    num_attention_heads: int = Field(default=2, ge=1)
    num_key_value_heads: int = Field(default=1, ge=1)
    head_dim: int = Field(default=64, ge=8)
    max_position_embeddings: int = Field(default=4096, ge=128)
    tie_word_embeddings: bool = True
    seed: int = 0


def build_tiny_model(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerFast) -> Qwen3ForCausalLM:
    """A randomly initialised (seeded) Qwen3 causal LM sized for ``tokenizer``."""
    import torch

    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ValueError(
            f"num_attention_heads ({cfg.num_attention_heads}) must be a multiple of "
            f"num_key_value_heads ({cfg.num_key_value_heads})"
        )
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(cfg.seed)
    return Qwen3ForCausalLM(config)


def save_checkpoint(model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerFast, path: str | Path) -> Path:
    """Save model and tokenizer in Hugging Face format (safetensors) under ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_checkpoint(corpus: Iterable[str], cfg: TinyModelConfig, vocab_size: int, path: str | Path) -> str:
    """Train a tokenizer on ``corpus``, build a tiny model for it and save both under ``path``."""
    tokenizer = train_tokenizer(corpus, vocab_size=vocab_size)
    return str(save_checkpoint(build_tiny_model(cfg, tokenizer), tokenizer, path))
