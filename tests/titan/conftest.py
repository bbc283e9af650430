"""Fixtures for the TorchTitan trainer tests: tiny Qwen3 and Llama checkpoints, a fixed batch.

These tests need ``torchtitan==0.3.0`` (``pip install -e '.[titan]'``, or the vLLM venv that
``scripts/install_vllm.sh`` builds). Where it is not importable they are not collected at all; the
end-to-end GRPO run also needs vLLM and is not collected where vLLM is absent.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.types import Batch

if importlib.util.find_spec("torchtitan") is None:
    collect_ignore_glob = ["test_*.py"]
elif importlib.util.find_spec("vllm") is None:  # the end-to-end run generates with vLLM
    collect_ignore_glob = ["test_grpo_vllm_titan.py"]


def _titan_import_error() -> str | None:
    """Why torchtitan 0.3.0 cannot run on this torch (it needs torch >= 2.12's FSDP API), if it can't."""
    try:
        import torchtitan.distributed.fsdp  # noqa: F401
    except ImportError as err:
        return f"torchtitan 0.3.0 does not run on torch {torch.__version__}: {err}"
    return None


def pytest_collection_modifyitems(config, items):
    # an installed torchtitan on a too-old torch (the lent GPU image has torch 2.11): say so per test
    reason = _titan_import_error() if importlib.util.find_spec("torchtitan") is not None else None
    if reason is not None:
        for item in items:
            if "titan" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))

CORPUS = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\nmask = offs < n\n"] * 30
TINY = TinyModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=64)


def make_batch(vocab: int, rows: int = 5, width: int = 24, seed: int = 7) -> Batch:
    """Random tokens with uneven response masks, random advantages, fixed generator logprobs."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, width), generator=g)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):
        mask[r, 4 + r: width - 1] = True
    targets = torch.where(mask, torch.roll(ids, -1, 1), torch.full_like(ids, -100))
    return Batch(input_ids=ids, target_ids=targets, loss_mask=mask,
                 advantages=torch.randn(rows, width, generator=g) * mask,
                 generator_logprobs=torch.full((rows, width), -3.0) * mask)


def write_qwen3_checkpoint(path: Path) -> str:
    """The project's tiny Qwen3 (tied embeddings) saved as an HF directory."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    return str(save_checkpoint(build_tiny_model(TINY, tokenizer), tokenizer, path))


@pytest.fixture(scope="session")
def qwen3_checkpoint(tmp_path_factory) -> str:
    return write_qwen3_checkpoint(tmp_path_factory.mktemp("qwen3"))


@pytest.fixture(scope="session")
def llama_checkpoint(tmp_path_factory) -> str:
    """A tiny Llama (untied embeddings, GQA) — exercises the llama3 adapter's RoPE permutation."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         rms_norm_eps=1e-5, rope_theta=50000.0, tie_word_embeddings=False)
    torch.manual_seed(1)
    return str(save_checkpoint(LlamaForCausalLM(config), tokenizer, tmp_path_factory.mktemp("llama")))


@pytest.fixture
def batch_for() -> Callable[[int], Batch]:
    return make_batch
