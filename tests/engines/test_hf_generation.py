"""HF generation engine: shapes, seeds, stop handling, logprobs that a full forward reproduces."""

from __future__ import annotations

import pytest
import torch

from actors.engines.hf_generation import HFGenerationEngine
from actors.engines.sampling import SamplingConfig
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, train_tokenizer

CORPUS = ["def kernel(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"] * 30


@pytest.fixture(scope="module")
def engine():
    tok = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(num_hidden_layers=1), tok)
    return HFGenerationEngine(model, tok)


def prompts(engine):
    enc = engine.tokenizer
    return [enc.encode("def kernel(", add_special_tokens=False), enc.encode("pid = tl", add_special_tokens=False)]


def test_n_samples_per_prompt_in_prompt_major_order(engine):
    ps = prompts(engine)
    out = engine.generate(ps, n=3, sampling=SamplingConfig(max_tokens=8, seed=1))
    assert len(out) == 6
    assert [c.prompt_ids for c in out] == [ps[0]] * 3 + [ps[1]] * 3
    for c in out:
        assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids)
        assert all(lp <= 0 for lp in c.logprobs)
        assert c.finish_reason == ("stop" if c.token_ids[-1] == engine.tokenizer.eos_token_id else "length")


def test_seeded_sampling_is_reproducible_and_greedy_is_deterministic(engine):
    ps = prompts(engine)
    a = engine.generate(ps, 2, SamplingConfig(max_tokens=6, seed=7))
    b = engine.generate(ps, 2, SamplingConfig(max_tokens=6, seed=7))
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    g = engine.generate(ps, 2, SamplingConfig(max_tokens=6, temperature=0))
    assert g[0].token_ids == g[1].token_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_a_full_forward_of_the_sampled_sequence(engine, temperature, reorder_tolerance):
    """What the trainer will recompute (prompt + completion, no padding) equals what was sampled.

    The KV-cached decode and the full forward are the same fp32 math in other summation orders:
    the tolerance is the reordering bound over a logit's chain of reductions (attention over the
    sequence, the MLP and hidden widths, the vocabulary's log-sum-exp), relative to the largest
    scaled logit; ~1e-6 measured under AVX2 and AVX512, while a wrong temperature or stale weights
    move logprobs by 1e-2 or more."""
    ps = prompts(engine)
    out = engine.generate(ps, 2, SamplingConfig(max_tokens=10, temperature=temperature, seed=3))
    cfg = engine.model.config
    for c in out:
        ids = torch.tensor([c.prompt_ids + c.token_ids])
        with torch.no_grad():
            logits = engine.model(ids).logits[0, len(c.prompt_ids) - 1 : -1].float() / temperature
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
        depth = ids.shape[1] + cfg.intermediate_size + 4 * cfg.hidden_size + cfg.vocab_size
        atol = reorder_tolerance(depth) * float(logits.abs().max())
        torch.testing.assert_close(torch.tensor(c.logprobs), expected, atol=atol, rtol=0)


def test_load_weights_changes_generation_and_version(engine):
    ps = prompts(engine)
    greedy = SamplingConfig(max_tokens=6, temperature=0)
    before = [c.token_ids for c in engine.generate(ps, 1, greedy)]
    original = {k: v.clone() for k, v in engine.model.state_dict().items()}
    noisy = {k: v + 0.5 * torch.randn_like(v) for k, v in original.items()}
    engine.load_weights(noisy, version=4)
    changed = engine.generate(ps, 1, greedy)
    assert changed[0].policy_version == 4
    assert [c.token_ids for c in changed] != before
    engine.load_weights(original, version=5)
    assert [c.token_ids for c in engine.generate(ps, 1, greedy)] == before
    with pytest.raises(KeyError, match="weights not in the model"):
        engine.load_weights({"nope.weight": torch.zeros(1)}, version=6)
    with pytest.raises(ValueError, match="n must be >= 1"):
        engine.generate(ps, 0, greedy)
