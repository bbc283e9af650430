"""TorchTitan and HF models agree after the state-dict adapter (issue 8, item 5)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from actors.engines.hf_training import OptimConfig
from actors.engines.titan_model import titan_model_spec
from actors.engines.titan_training import TitanConfig, TitanTrainingEngine
from losses import build_loss

pytestmark = pytest.mark.titan


def _max_logit_diff(checkpoint: str, titan: TitanConfig) -> float:
    engine = TitanTrainingEngine(checkpoint, OptimConfig(), build_loss({"name": "grpo"}), titan=titan)
    hf = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    ids = torch.randint(0, hf.config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0))
    engine.model.eval()
    with torch.no_grad():
        ours, theirs = engine._logits(ids), hf(input_ids=ids).logits
    assert ours.shape == theirs.shape
    assert theirs.abs().max() > 0.01  # not a degenerate comparison of near-zero logits
    return float((ours - theirs).abs().max())


@pytest.mark.parametrize("fuse_qkv", [True, False])
def test_qwen3_logits_match_hf(qwen3_checkpoint, fuse_qkv, record_property):
    diff = _max_logit_diff(qwen3_checkpoint, TitanConfig(fuse_qkv=fuse_qkv))
    record_property("qwen3_max_logit_diff", diff)
    print(f"qwen3 fuse_qkv={fuse_qkv}: max |logit diff| = {diff:.3g}")
    assert diff < 1e-5


def test_flex_attention_path_matches_hf(qwen3_checkpoint, record_property):
    """The GPU default (FlexAttention with TorchTitan's causal block mask); its forward runs on CPU."""
    diff = _max_logit_diff(qwen3_checkpoint, TitanConfig(attention="flex"))
    record_property("qwen3_flex_max_logit_diff", diff)
    print(f"qwen3 flex attention: max |logit diff| = {diff:.3g}")
    assert diff < 1e-5


def test_llama3_logits_match_hf(llama_checkpoint, record_property):
    diff = _max_logit_diff(llama_checkpoint, TitanConfig())
    record_property("llama3_max_logit_diff", diff)
    print(f"llama3: max |logit diff| = {diff:.3g}")
    assert diff < 1e-5


def test_spec_is_sized_from_the_hf_config():
    hf = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-5, tie_word_embeddings=False)
    spec = titan_model_spec(hf)
    assert spec.name == "qwen3" and spec.model.vocab_size == 300 and len(spec.model.layers) == 3
    assert spec.model.enable_weight_tying is False
    assert spec.model.norm.eps == 1e-5 and spec.model.layers[2].attention.qk_norm.eps == 1e-5
    assert spec.model.layers[0].feed_forward.w1.out_features == 96


def test_unsupported_checkpoints_are_refused_by_name():
    with pytest.raises(ValueError, match="attention_bias=True"):
        titan_model_spec(Qwen3Config(attention_bias=True))
    with pytest.raises(ValueError, match="does not match the checkpoint's model_type 'qwen3'"):
        titan_model_spec(Qwen3Config(), family="llama3")
    from transformers import GPT2Config

    with pytest.raises(ValueError, match="no TorchTitan family for HF model_type 'gpt2'"):
        titan_model_spec(GPT2Config())
