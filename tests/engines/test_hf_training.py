"""Collation and the HF training engine: token alignment, ratio = 1 on fresh weights, exact
micro-batching, learning direction, schedule validation."""

from __future__ import annotations

import copy

import pytest
import torch

from actors.engines.batching import collate_turns
from actors.engines.hf_generation import HFGenerationEngine
from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from actors.engines.sampling import SamplingConfig
from forge_kernels.config import ConfigError, validate
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, train_tokenizer
from forge_kernels.types import Completion, Episode, Turn
from losses import build_loss

CORPUS = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\nmask = offs < n\n"] * 30


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=300)


def make_model(tokenizer):
    return build_tiny_model(TinyModelConfig(num_hidden_layers=1), tokenizer)


def episode(prompt, tokens, logprobs, advantage=0.0, version=0, gid="g"):
    c = Completion(prompt_ids=prompt, token_ids=tokens, text="", logprobs=logprobs, policy_version=version)
    return Episode(episode_id=f"e{len(tokens)}", group_id=gid, task_name="t", turns=[Turn(c, advantage=advantage)])


def test_collate_aligns_targets_mask_and_logprobs():
    batch = collate_turns(
        [episode([5, 6], [7, 8, 9], [-0.1, -0.2, -0.3], advantage=2.0),
         episode([4], [3], [-0.5], advantage=-1.0, version=3)],
        pad_id=0,
    )
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [4, 3, 0, 0, 0]]
    assert batch.target_ids.tolist() == [[6, 7, 8, 9, -100], [3, -100, -100, -100, -100]]
    assert batch.loss_mask.tolist() == [[False, True, True, True, False], [True, False, False, False, False]]
    assert batch.generator_logprobs[0].tolist() == pytest.approx([0, -0.1, -0.2, -0.3, 0])
    assert batch.advantages[1].tolist() == [-1.0, 0, 0, 0, 0]
    assert batch.policy_versions == [0, 3] and batch.ref_logprobs is None
    with pytest.raises(ValueError, match="empty"):
        collate_turns([], pad_id=0)


def test_trainer_logprobs_equal_generator_logprobs_on_same_weights(tokenizer):
    """slime's invariant: on the first step of a version the importance ratio is 1."""
    model = make_model(tokenizer)
    gen = HFGenerationEngine(copy.deepcopy(model), tokenizer)
    prompts = [tokenizer.encode("offs = tl", add_special_tokens=False), tokenizer.encode("mask", add_special_tokens=False)]
    completions = gen.generate(prompts, 2, SamplingConfig(max_tokens=12, seed=0))
    episodes = [Episode(f"e{i}", "g", "t", [Turn(c)]) for i, c in enumerate(completions)]
    batch = collate_turns(episodes, pad_id=tokenizer.pad_token_id)
    trainer = HFTrainingEngine(model, OptimConfig(), build_loss({"name": "grpo"}))
    recomputed = trainer.logprobs(batch)
    diff = (recomputed - batch.generator_logprobs).abs()[batch.loss_mask]
    assert diff.max().item() < 1e-4


def test_micro_batching_matches_one_big_batch(tokenizer, reorder_tolerance):
    """Accumulating micro-batches gives the one-big-batch loss and gradient.

    Compared before the optimiser step: Adam divides each update by sqrt(v), so a weight whose
    gradient is ~0 turns a 1e-9 reduction-order difference into a full lr-sized step (machines
    with other SIMD paths differ there; one AVX512 box saw 2.5e-5 after one step at lr 1e-2).
    The gradients are fp32, and the two paths differ only in the order of their sums: the
    tolerance is the reordering bound for the chain of reductions a gradient entry goes through
    (tokens of the batch and the micro-batch accumulation, the vocabulary, the MLP and hidden
    widths of each layer): 5e-4 of the largest entry here; measured 8e-8 (AVX2 and AVX512), and
    a wrong micro-batch weighting is off by O(1)."""
    torch.manual_seed(0)
    eps = [episode([1 + i, 2], [3, 4 + i, 5][: 1 + i % 3], [-1.0] * (1 + i % 3), advantage=(-1) ** i * (i + 1))
           for i in range(6)]
    batch = collate_turns(eps, pad_id=tokenizer.pad_token_id)
    results = []
    for budget in (10_000, batch.input_ids.shape[1]):  # one micro-batch vs one row per micro-batch
        for aggregation in ("token-mean", "seq-mean-token-mean"):
            engine = HFTrainingEngine(make_model(tokenizer), OptimConfig(lr=1e-2, micro_batch_tokens=budget),
                                      build_loss({"name": "grpo", "aggregation": aggregation}))
            assert len(engine.micro_batches(batch)) == (1 if budget == 10_000 else 6)
            engine.optimizer.step = lambda: None  # keep the accumulated gradients as they are
            metrics = engine.train_step(batch)
            results.append((metrics["loss/total"], [p.grad.clone() for p in engine.model.parameters()]))
    cfg = engine.model.config
    depth = (batch.input_ids.numel() + 6 + cfg.vocab_size
             + cfg.num_hidden_layers * (cfg.intermediate_size + 4 * cfg.hidden_size + batch.input_ids.shape[1]))
    tol = reorder_tolerance(depth)
    assert 1e-5 < tol < 1e-3  # loose enough for any summation order, tight enough to catch a wrong weighting
    for big, small in ((results[0], results[2]), (results[1], results[3])):
        assert big[0] == pytest.approx(small[0], rel=tol)
        scale = max(float(g.abs().max()) for g in big[1])
        assert scale > 0
        for a, b in zip(big[1], small[1], strict=True):
            torch.testing.assert_close(a, b, atol=tol * scale, rtol=0)
    # the two aggregations weight tokens differently: far apart at this tolerance (the check can fail)
    assert abs(results[0][0] - results[1][0]) > 20 * tol * abs(results[0][0])


def test_training_moves_probability_toward_positive_advantage(tokenizer):
    engine = HFTrainingEngine(make_model(tokenizer), OptimConfig(lr=3e-3), build_loss({"name": "grpo"}))
    good, bad = [7, 8, 9, 10], [11, 12, 13, 14]
    eps = [episode([1, 2], good, [-5.0] * 4, advantage=1.0), episode([1, 2], bad, [-5.0] * 4, advantage=-1.0)]
    batch = collate_turns(eps, pad_id=0)
    before = engine.logprobs(batch).sum(dim=1)
    for _ in range(5):
        batch.generator_logprobs = engine.logprobs(batch)  # on-policy
        metrics = engine.train_step(batch)
    after = engine.logprobs(batch).sum(dim=1)
    assert after[0] > before[0] + 0.5 and after[1] < before[1] - 0.5
    assert metrics["train/grad_norm"] > 0 and metrics["train/lr"] == pytest.approx(3e-3)


def test_schedules_and_validation():
    with pytest.raises(ConfigError, match="schedule 'cosine' needs total_steps"):
        validate(OptimConfig, {"schedule": "cosine"})
    cfg = OptimConfig(lr=1.0, warmup_steps=2, schedule="linear", total_steps=6)
    engine = HFTrainingEngine.__new__(HFTrainingEngine)
    engine.cfg = cfg
    assert [round(engine._lr_factor(s), 3) for s in range(7)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]
