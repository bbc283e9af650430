"""``trainer.fused_lm_head``: the HF engine scores tokens from the last hidden states and the LM
head (vocabulary chunks, Triton kernels; the interpreter here) and gets the loss, the gradients
and the logprobs of the logits path."""

from __future__ import annotations

import copy

import pytest
import torch

from actors.engines.batching import collate_turns
from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, train_tokenizer
from forge_kernels.types import Completion, Episode, Turn
from losses import build_loss

CORPUS = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\nmask = offs < n\n"] * 30


def _batch(tokenizer):
    g = torch.Generator().manual_seed(0)
    episodes = []
    for i, n in enumerate((5, 9, 3)):
        tokens = torch.randint(10, len(tokenizer), (n,), generator=g).tolist()
        c = Completion(prompt_ids=[3, 4, 5], token_ids=tokens, text="", logprobs=[-1.0] * n, policy_version=0)
        episodes.append(Episode(f"e{i}", "g", "t", [Turn(c, advantage=float(i) - 1.0)]))
    return collate_turns(episodes, pad_id=tokenizer.pad_token_id)


@pytest.mark.parametrize("loss_name", ["grpo", "gspo"])
def test_fused_lm_head_matches_the_logits_path(loss_name, reorder_tolerance):
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(num_hidden_layers=1, tie_word_embeddings=False), tokenizer)
    loss = build_loss({"name": loss_name, "temperature": 0.8})
    plain = HFTrainingEngine(copy.deepcopy(model), OptimConfig(), loss)
    fused = HFTrainingEngine(copy.deepcopy(model), OptimConfig(), loss, fused_lm_head=True)
    batch = _batch(tokenizer)
    # logprobs (fp32 both ways: the same math up to summation order over 300 logits)
    assert torch.allclose(plain.logprobs(batch), fused.logprobs(batch), atol=1e-5)
    outs = []
    for engine in (plain, fused):
        engine.optimizer.zero_grad()
        out = engine._loss_on(batch, slice(0, len(batch)))
        out.loss.backward()
        outs.append(out)
    assert torch.allclose(outs[0].loss, outs[1].loss, atol=1e-6)
    # gradients of fp32 math in two summation orders (vocabulary chunks, Triton's interpreter on
    # numpy vs ATen): the reordering bound over the chain of reductions behind an entry (the
    # batch's tokens, the vocabulary, the layer's MLP and hidden widths); ~1e-7 measured
    cfg = model.config
    depth = batch.input_ids.numel() + cfg.vocab_size + cfg.intermediate_size + 4 * cfg.hidden_size
    tol = reorder_tolerance(depth)
    for (name, a), b in zip(plain.model.named_parameters(), fused.model.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=0, atol=tol * float(a.grad.abs().max()) + 1e-12), name


def test_fused_lm_head_refuses_titan():
    from actors.trainer import Trainer

    with pytest.raises(ValueError, match="fused_lm_head is for engine: hf"):
        Trainer.Config(engine="torchtitan", fused_lm_head=True)


def test_reference_logprobs_fused_equal_plain():
    from actors.reference import sequence_logprobs

    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(num_hidden_layers=1), tokenizer).eval()
    completions = [Completion(prompt_ids=[3, 4], token_ids=[9, 10, 11], text="", logprobs=[0.0] * 3, policy_version=0),
                   Completion(prompt_ids=[5], token_ids=[12, 13], text="", logprobs=[0.0] * 2, policy_version=0)]
    plain = sequence_logprobs(model, completions, 0.9, 4096, torch.device("cpu"))
    fused = sequence_logprobs(model, completions, 0.9, 4096, torch.device("cpu"), fused_lm_head=True)
    for a, b in zip(plain, fused, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_activation_checkpointing_gives_the_same_gradients():
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(num_hidden_layers=2), tokenizer)
    loss = build_loss({"name": "grpo"})
    batch = _batch(tokenizer)
    grads = []
    for ac in (False, True):
        engine = HFTrainingEngine(copy.deepcopy(model), OptimConfig(activation_checkpointing=ac), loss)
        engine._loss_on(batch, slice(0, len(batch))).loss.backward()
        grads.append([p.grad for p in engine.model.parameters()])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6 * float(a.abs().max()) + 1e-10)
