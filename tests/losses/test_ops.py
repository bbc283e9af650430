"""Golden values and gradient checks for losses.ops and the chunked logprob function."""

from __future__ import annotations

import math

import pytest
import torch

from losses.logprob_function import TargetLogprobsAndEntropy
from losses.ops import (
    aggregate,
    cispo_objective,
    clipped_surrogate,
    importance_ratio,
    kl_estimate,
    masked_mean,
    masked_std,
    masked_sum,
    token_logprobs,
)

LN2, LN3 = math.log(2.0), math.log(3.0)


def test_token_logprobs_golden_with_temperature_and_ignore_index():
    # row 0: p = [1/4, 3/4]; row 1 at temperature 2: z = [0, ln2] -> p = [1/3, 2/3]; row 2 ignored
    logits = torch.tensor([[[0.0, LN3], [0.0, 2 * LN2], [5.0, 1.0]]])
    (logp, ent), metrics = token_logprobs(logits[:, :2], torch.tensor([[1, 0]]), temperature=1.0)
    assert logp[0, 0].item() == pytest.approx(math.log(0.75), abs=1e-6)
    assert logp[0, 1].item() == pytest.approx(math.log(0.2), abs=1e-6)  # p = [1/5, 4/5]
    assert ent[0, 0].item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-6)
    (logp_t, ent_t), _ = token_logprobs(logits, torch.tensor([[1, 0, -100]]), temperature=2.0)
    assert logp_t[0, 1].item() == pytest.approx(math.log(1 / 3), abs=1e-6)
    assert ent_t[0, 1].item() == pytest.approx(-(1 / 3 * math.log(1 / 3) + 2 / 3 * math.log(2 / 3)), abs=1e-6)
    assert logp_t[0, 2].item() == 0.0
    assert metrics["loss/logprob_mean"].item() == pytest.approx((math.log(0.75) + math.log(0.2)) / 2, abs=1e-6)
    assert not metrics["loss/entropy"].requires_grad


def test_token_logprobs_matches_log_softmax_on_bf16_in_fp32_and_across_chunks():
    torch.manual_seed(0)
    logits = (torch.randn(3, 7, 50) * 4).to(torch.bfloat16)
    targets = torch.randint(0, 50, (3, 7))
    (logp, ent), _ = token_logprobs(logits, targets, temperature=0.7, chunk_elements=120)  # 2 rows a chunk
    assert logp.dtype == torch.float32
    ref = torch.log_softmax(logits.float() / 0.7, -1)
    assert torch.allclose(logp, ref.gather(-1, targets.unsqueeze(-1)).squeeze(-1), atol=1e-5)
    assert torch.allclose(ent, -(ref.exp() * ref).sum(-1), atol=1e-5)


def test_token_logprobs_gradient_matches_autograd_reference_in_bf16():
    torch.manual_seed(1)
    base = torch.randn(2, 5, 33).to(torch.bfloat16)
    targets = torch.randint(0, 33, (2, 5))
    targets[1, 4] = -100
    weights_lp, weights_h = torch.randn(2, 5), torch.randn(2, 5)
    x = base.clone().requires_grad_()
    (logp, ent), _ = token_logprobs(x, targets, temperature=1.3, chunk_elements=40)
    ((logp * weights_lp).sum() + (ent * weights_h).sum()).backward()
    y = base.float().requires_grad_()
    ref = torch.log_softmax(y / 1.3, -1)
    valid = targets != -100
    ref_lp = torch.where(valid, ref.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1), 0.0)
    ((ref_lp * weights_lp).sum() + (-(ref.exp() * ref).sum(-1) * weights_h).sum()).backward()
    assert x.grad.dtype == torch.bfloat16
    assert torch.allclose(x.grad.float(), y.grad, atol=1e-2)


@pytest.mark.parametrize("which", ["both", "logp_only", "entropy_only"])
def test_logprob_function_gradcheck_float64(which):
    torch.manual_seed(2)
    logits = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 5, 2, 2, 3])
    valid = torch.tensor([True, True, False, True, True])

    def fn(x):
        logp, ent = TargetLogprobsAndEntropy.apply(x, targets, valid, 0.8, 12)  # chunks of 2 rows
        return {"both": (logp, ent), "logp_only": (logp,), "entropy_only": (ent,)}[which]

    assert torch.autograd.gradcheck(fn, (logits,))


def test_masked_helpers_golden():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1, 1, 0], [0, 0, 1]])
    assert masked_sum(x, m).item() == 9.0
    assert masked_mean(x, m).item() == 3.0
    assert masked_mean(x, m, dim=-1).tolist() == [1.5, 6.0]
    assert masked_std(x, m).item() == pytest.approx(math.sqrt(((1 - 3) ** 2 + 1 + 9) / 2))
    assert masked_std(x, m, unbiased=False).item() == pytest.approx(math.sqrt(14 / 3))
    empty = torch.zeros_like(m)
    assert masked_mean(x, empty).item() == 0.0 and masked_std(x, empty).item() == 0.0


def test_importance_ratio_token_sequence_and_clamp():
    lp = torch.tensor([[0.0, math.log(4.0), 7.0]], requires_grad=True)
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1, 1, 0]])
    (ratio, log_ratio), metrics = importance_ratio(lp, old, mask, "token", log_ratio_clamp=5.0)
    assert ratio.detach().tolist()[0] == pytest.approx([1.0, 4.0, math.exp(5.0)])
    assert metrics["loss/ratio_mean"].item() == pytest.approx(2.5)
    assert metrics["loss/ratio_max"].item() == pytest.approx(4.0)
    assert metrics["loss/ratio_min"].item() == pytest.approx(1.0)
    (seq, _), _ = importance_ratio(lp, old, mask, "sequence")
    assert seq.detach().tolist()[0] == pytest.approx([2.0, 2.0, 2.0])  # geometric mean of 1 and 4
    # gradient of s = exp(mean log r) flows to each masked token: ds/dlp_t = s / n
    seq[0, 0].backward()
    assert lp.grad.tolist()[0] == pytest.approx([1.0, 1.0, 0.0])


def test_importance_ratio_rejects_unknown_level():
    with pytest.raises(ValueError, match="'tokens'"):
        importance_ratio(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "tokens")  # type: ignore[arg-type]


def test_kl_estimators_golden():
    lp = torch.tensor([[0.0, 0.0]])
    ref = torch.tensor([[math.log(2.0), -30.0]])  # r = ln 2 and -30
    mask = torch.tensor([[1, 0]])
    k1, _ = kl_estimate(lp, ref, mask, "k1")
    k2, _ = kl_estimate(lp, ref, mask, "k2")
    k3, m3 = kl_estimate(lp, ref, mask, "k3")
    k3c, _ = kl_estimate(lp, ref, mask, "k3_clamped", clamp=10.0)
    assert k1[0, 0].item() == pytest.approx(-LN2)
    assert k2[0, 0].item() == pytest.approx(0.5 * LN2**2)
    assert k3[0, 0].item() == pytest.approx(2 - 1 - LN2)
    assert m3["loss/ref_kl"].item() == pytest.approx(1 - LN2)
    assert k3[0, 1].item() == pytest.approx(math.exp(-30) - 1 + 30)  # unclamped: 29
    assert k3c[0, 1].item() == pytest.approx(10.0)  # r clamped to -20 -> 19, then to 10
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(lp, ref, mask, "k4")  # type: ignore[arg-type]


def test_clipped_surrogate_asymmetric_and_dual_clip_golden():
    ratio = torch.tensor([[1.5, 0.5, 0.5, 5.0, 1.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -2.0, 3.0]])
    mask = torch.ones(1, 5)
    loss, metrics = clipped_surrogate(ratio, adv, mask, clip_low=0.2, clip_high=0.3, dual_clip=3.0)
    # -A r vs -A clip(r, .8, 1.3): [-1.3, -0.5, 0.8, 10 -> dual bound 6, -3]
    assert loss.detach().tolist()[0] == pytest.approx([-1.3, -0.5, 0.8, 6.0, -3.0])
    loss.sum().backward()
    assert ratio.grad.tolist()[0] == pytest.approx([0.0, -1.0, 0.0, 0.0, -3.0])
    assert metrics["loss/clip_frac_high"].item() == pytest.approx(1 / 5)
    assert metrics["loss/clip_frac_low"].item() == pytest.approx(1 / 5)
    assert metrics["loss/dual_clip_frac"].item() == pytest.approx(1 / 5)
    no_dual, _ = clipped_surrogate(ratio.detach(), adv, mask, 0.2, 0.3)
    assert no_dual[0, 3].item() == pytest.approx(10.0)


def test_cispo_objective_keeps_gradient_of_clipped_tokens():
    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ratio = torch.tensor([[3.0, 0.5, 1.0]])
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    loss, metrics = cispo_objective(ratio, lp, adv, torch.ones(1, 3), clip_low=0.2, clip_high=1.0)
    # weights clip(r, 0.8, 2.0) = [2, 0.8, 1]; loss = -w A lp
    assert loss.detach().tolist()[0] == pytest.approx([2.0, -1.6, 1.0])
    loss.sum().backward()
    assert lp.grad.tolist()[0] == pytest.approx([-2.0, 0.8, -2.0])
    assert metrics["loss/clip_frac_high"].item() == pytest.approx(1 / 3)
    assert metrics["loss/clip_frac_low"].item() == pytest.approx(1 / 3)


def test_aggregation_modes_golden():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # third sequence is empty
    tm, metrics = aggregate(per_token, mask, "token-mean")
    assert tm.item() == pytest.approx(10 / 4)
    assert metrics["loss/num_tokens"].item() == 4 and metrics["loss/num_seqs"].item() == 2
    assert aggregate(per_token, mask, "seq-mean-token-mean")[0].item() == pytest.approx((2 + 4) / 2)
    assert aggregate(per_token, mask, "seq-mean-token-sum", scale=0.5)[0].item() == pytest.approx((6 + 4) / 2 * 0.5)
    assert aggregate(per_token, mask, "fixed-horizon")[0].item() == pytest.approx(10 / (3 * 3))
    assert aggregate(per_token, mask, "fixed-horizon", horizon=5)[0].item() == pytest.approx(10 / 15)
    with pytest.raises(ValueError, match="'sum'"):
        aggregate(per_token, mask, "sum")  # type: ignore[arg-type]
