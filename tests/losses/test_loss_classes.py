"""Loss classes: hand-worked golden values and gradients, KL/entropy terms, guards, diagnostics."""

from __future__ import annotations

import math

import pytest
import torch

from losses import CISPOLoss, DAPOLoss, GRPOLoss, GSPOLoss, TRLOOLoss, build_loss

LN2 = math.log(2.0)
S = math.sqrt(0.75)  # GSPO: geometric mean of ratios 1.5 and 0.5

# (loss, expected value, expected d loss / d logp) on the hand batch of conftest.py
GOLDEN = [
    (GRPOLoss(), (-1.2 - 0.5) / 2 / 2 + 1 / 2, [[0.0, -0.125], [0.5, 0.0]]),
    (DAPOLoss(), (-1.28 - 0.5 + 1) / 3, [[0.0, -0.5 / 3], [1 / 3, 0.0]]),
    (GSPOLoss(), (-S + 1) / 2, [[-S / 4, -S / 4], [0.5, 0.0]]),
    (TRLOOLoss(), ((-1.28 - 0.5) + 1) / 2, [[0.0, -0.25], [0.5, 0.0]]),
    (CISPOLoss(clip_high=0.25), 0.25 * LN2, [[-1.25 / 3, -0.5 / 3], [1 / 3, 0.0]]),
]


@pytest.mark.parametrize("loss, value, dlogp", GOLDEN, ids=[type(g[0]).__name__ for g in GOLDEN])
def test_golden_value_and_gradient(hand_batch, logit_grad, loss, value, dlogp):
    out = loss(*hand_batch.args())
    assert out.loss.item() == pytest.approx(value, abs=1e-12)
    out.loss.backward()
    expected = logit_grad(hand_batch, torch.tensor(dlogp, dtype=torch.float64))
    assert torch.allclose(hand_batch.logits.grad, expected, atol=1e-12)


def test_grpo_diagnostics_golden(hand_batch):
    m = GRPOLoss()(*hand_batch.args()).scalars()
    assert m["loss/clip_frac_high"] == pytest.approx(1 / 3)
    assert m["loss/clip_frac_low"] == 0.0
    assert m["loss/ratio_mean"] == pytest.approx(1.0) and m["loss/ratio_max"] == pytest.approx(1.5)
    assert m["loss/ratio_min"] == pytest.approx(0.5)
    assert m["loss/entropy"] == pytest.approx(LN2)
    assert m["loss/num_tokens"] == 3 and m["loss/num_seqs"] == 2
    assert m["loss/advantage_mean"] == pytest.approx(1 / 3)
    assert m["loss/advantage_min"] == -1.0 and m["loss/advantage_max"] == 1.0
    # approx KL(generator || trainer) = mean of r - 1 - log r over the 3 tokens
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 1.0)]
    assert m["loss/approx_kl"] == pytest.approx(sum(k3) / 3)
    assert m["loss/policy"] == m["loss/total"]


def test_every_loss_reports_the_same_diagnostics(hand_batch):
    required = {
        "loss/total", "loss/policy", "loss/clip_frac_low", "loss/clip_frac_high", "loss/approx_kl",
        "loss/entropy", "loss/ratio_mean", "loss/ratio_max", "loss/advantage_mean", "loss/advantage_std",
        "loss/num_tokens", "loss/num_seqs",
    }
    for cls in (GRPOLoss, GSPOLoss, DAPOLoss, TRLOOLoss, CISPOLoss):
        out = cls()(*hand_batch.args())
        assert required <= set(out.metrics), cls.__name__
        assert all(not v.requires_grad and v.dim() == 0 for v in out.metrics.values())


def test_kl_penalty_and_entropy_bonus(hand_batch, logit_grad):
    ref = torch.full((2, 2), -2 * LN2, dtype=torch.float64)  # r = ref - logp = -ln 2
    loss = GRPOLoss(beta=0.5, entropy_coef=0.1)
    out = loss(*hand_batch.args(), ref_logprobs=ref)
    k3 = 0.5 - 1 + LN2
    assert out.loss.item() == pytest.approx(0.075 + 0.5 * k3 - 0.1 * LN2, abs=1e-12)
    assert out.metrics["loss/ref_kl"].item() == pytest.approx(k3)
    out.loss.backward()
    # dk3/dlogp = 1 - exp(r) = 0.5, weighted by the seq-mean-token-mean weights; dH = 0 at uniform
    dlogp = torch.tensor([[0.0, -0.125], [0.5, 0.0]], dtype=torch.float64)
    dlogp += 0.5 * 0.5 * torch.tensor([[0.25, 0.25], [0.5, 0.0]], dtype=torch.float64)
    assert torch.allclose(hand_batch.logits.grad, logit_grad(hand_batch, dlogp), atol=1e-12)


def test_entropy_bonus_gradient_raises_entropy():
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 5, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 5, (1, 3))
    zeros = torch.zeros(1, 3, dtype=torch.float64)
    out = GRPOLoss(entropy_coef=1.0)(logits, targets, torch.ones(1, 3), zeros, zeros)
    out.loss.backward()
    stepped = (logits - 0.01 * logits.grad).detach()
    before = -(logits.softmax(-1) * logits.log_softmax(-1)).sum()
    after = -(stepped.softmax(-1) * stepped.log_softmax(-1)).sum()
    assert after > before


def test_tis_guard_decouples_ratio_and_weights_tokens(hand_batch, logit_grad):
    loss = build_loss({"name": "grpo", "guards": [{"name": "tis", "cap": 1.2}]})
    out = loss(*hand_batch.args())
    m = out.scalars()
    assert m["loss/ratio_max"] == pytest.approx(1.0)  # trust region against the trainer itself
    assert m["guard/tis_rejection_rate"] == pytest.approx(1 / 3)  # ratio 1.5 truncated to 1.2
    # per-token loss -w A r with r = 1: seq0 [-1.2, -0.5], seq1 [+1]
    assert out.loss.item() == pytest.approx((-1.2 - 0.5) / 4 + 0.5)
    out.loss.backward()
    dlogp = torch.tensor([[-1.2 / 4, -0.5 / 4], [0.5, 0.0]], dtype=torch.float64)
    assert torch.allclose(hand_batch.logits.grad, logit_grad(hand_batch, dlogp), atol=1e-12)


def test_mrs_guard_drops_mismatched_trajectories(hand_batch):
    out = GRPOLoss.model_validate({"guards": [{"name": "mrs"}]})(*hand_batch.args())
    m = out.scalars()
    assert m["guard/mrs_rejection_rate"] == pytest.approx(0.5)  # seq 0 has geo mean sqrt(.75)
    assert m["loss/num_tokens"] == 1
    assert out.loss.item() == pytest.approx(1.0)


def test_input_errors_are_clear(hand_batch):
    with pytest.raises(ValueError, match="beta=0.1 but got no ref_logprobs"):
        GRPOLoss(beta=0.1)(*hand_batch.args())
    b = hand_batch
    with pytest.raises(ValueError, match=r"advantages has shape \(2,\), expected \(2, 2\)"):
        GRPOLoss()(b.logits, b.target_ids, b.loss_mask, torch.ones(2), b.generator_logprobs)
    with pytest.raises(ValueError, match="logits"):
        GRPOLoss()(b.logits[:, :1], b.target_ids, b.loss_mask, b.advantages, b.generator_logprobs)


def test_estimator_names():
    assert GRPOLoss.advantage_estimator == "grpo"
    assert TRLOOLoss.advantage_estimator == "trloo"
    assert {c.advantage_estimator for c in (GSPOLoss, DAPOLoss, CISPOLoss)} == {"grpo"}


def test_ignore_index_tokens_do_not_count(hand_batch):
    b = hand_batch
    targets = b.target_ids.clone()
    targets[0, 1] = -100  # same as masking it out
    masked = b.loss_mask.clone()
    masked[0, 1] = 0
    a = GRPOLoss()(b.logits, targets, b.loss_mask, b.advantages, b.generator_logprobs)
    c = GRPOLoss()(b.logits, b.target_ids, masked, b.advantages, b.generator_logprobs)
    assert a.loss.item() == pytest.approx(c.loss.item())
