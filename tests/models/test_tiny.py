"""Locally trained tokenizer and tiny Qwen3 model: round trips, chat template, HF save/load."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer

CORPUS = [
    "import torch\nimport triton\nimport triton.language as tl\n",
    "@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
    "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n",
    "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=400)


def test_tokenizer_round_trips_any_text(tokenizer):
    for text in [CORPUS[1], "ünïcødé ✓ and\ttabs\n\n  spaces", "<think>plan</think>```python\nx\n```"]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
    assert len(tokenizer.encode(CORPUS[1], add_special_tokens=False)) < len(CORPUS[1]) / 2  # BPE merged


def test_chat_template_and_special_tokens(tokenizer):
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        tokenize=False, add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    assert len(tokenizer.encode("<think>", add_special_tokens=False)) == 1
    with pytest.raises(ValueError, match="vocab_size must be at least"):
        train_tokenizer(CORPUS, vocab_size=100)


def test_tiny_model_forward_and_hf_round_trip(tokenizer, tmp_path):
    cfg = TinyModelConfig(num_hidden_layers=1)
    model = build_tiny_model(cfg, tokenizer)
    assert model.config.vocab_size == len(tokenizer) and model.config.head_dim == 64
    ids = torch.tensor([tokenizer.encode(CORPUS[0], add_special_tokens=False)])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    same = build_tiny_model(cfg, tokenizer)  # seeded: identical weights
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values()))
    path = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(path)
    assert torch.allclose(loaded(ids).logits, logits, atol=1e-5)
    assert AutoTokenizer.from_pretrained(path).decode(ids[0]) == CORPUS[0]
    with pytest.raises(ValueError, match="must be a multiple of num_key_value_heads"):
        build_tiny_model(TinyModelConfig(num_attention_heads=3, num_key_value_heads=2), tokenizer)
