"""Real architectures with random weights: published dimensions, parameter counts, config errors."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3ForCausalLM

from forge_kernels.models.real_shapes import REAL_SHAPES, build_random_init_checkpoint, parameter_count, real_shape_config

# published parameter counts (model cards), in billions, rounded as published
PUBLISHED_B = {"qwen3-0.6b": 0.6, "qwen3-1.7b": 1.7, "qwen3-4b": 4.0, "qwen3-8b": 8.2, "qwen3-14b": 14.8,
               "qwen3-32b": 32.8}


@pytest.mark.parametrize("name", sorted(REAL_SHAPES))
def test_shapes_match_the_model_and_the_published_size(name):
    with torch.device("meta"):
        model = Qwen3ForCausalLM(real_shape_config(name, pad_token_id=0, eos_token_id=1))
    assert sum(p.numel() for p in model.parameters()) == parameter_count(name)
    assert model.config.vocab_size == 151_936
    assert abs(parameter_count(name) / 1e9 - PUBLISHED_B[name]) < 0.06


def test_unknown_architecture_names_the_choices():
    with pytest.raises(ValueError, match=r"model.random_init='qwen3-7b' is not a known architecture.*qwen3-8b"):
        parameter_count("qwen3-7b")


def test_grpo_config_refuses_path_and_random_init_together(tiny_config):
    from apps.grpo.model_init import resolve_model_path

    with pytest.raises(ValueError, match="both set"):
        resolve_model_path(tiny_config("model.path=/x", "model.random_init=qwen3-1.7b"))
    with pytest.raises(Exception, match="random_init"):
        tiny_config("model.random_init=qwen3-7b")


@pytest.mark.slow
def test_random_init_checkpoint_loads_with_real_shapes(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_random_init_checkpoint("qwen3-0.6b", ["def kernel(x): return x"] * 50, tmp_path / "m",
                                        tokenizer_vocab=300)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) == parameter_count("qwen3-0.6b")
    assert len(tok) < model.config.vocab_size == 151_936
    assert model.lm_head.weight.dtype == torch.bfloat16
