"""Property tests (hypothesis): GRPO's gradient at ratio 1, and GSPO == GRPO on one-token sequences."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from losses import GRPOLoss, GSPOLoss
from losses.ops import aggregate, token_logprobs

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "fixed-horizon"]


def _batch(seed: int, b: int, t: int, v: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64)
    targets = torch.randint(0, v, (b, t), generator=g)
    mask = torch.rand(b, t, generator=g) < 0.7
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    return g, logits, targets, mask, adv


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    b=st.integers(1, 3),
    t=st.integers(1, 5),
    v=st.integers(2, 7),
    mode=st.sampled_from(MODES),
    scale=st.floats(0.1, 3.0),
)
def test_grpo_gradient_at_ratio_one_is_minus_a_grad_logp(seed, b, t, v, mode, scale):
    _, logits, targets, mask, adv = _batch(seed, b, t, v)
    (logp, _), _ = token_logprobs(logits, targets)
    x = logits.clone().requires_grad_()
    out = GRPOLoss(aggregation=mode, aggregation_scale=scale)(x, targets, mask, adv, logp.detach())
    out.loss.backward()

    y = logits.clone().requires_grad_()
    ref_logp = torch.log_softmax(y, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    expected, _ = aggregate(-adv * ref_logp, mask, mode, scale=scale)
    expected.backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-12)
    assert torch.allclose(out.loss, aggregate(-adv, mask, mode, scale=scale)[0], atol=1e-12)  # value: -A * 1


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    b=st.integers(1, 6),
    v=st.integers(2, 7),
    clip=st.tuples(st.floats(0.0, 0.9), st.floats(0.0, 2.0)),
    dual=st.one_of(st.none(), st.floats(1.5, 5.0)),
    mode=st.sampled_from(MODES),
)
def test_gspo_equals_grpo_when_each_sequence_has_one_token(seed, b, v, clip, dual, mode):
    g, logits, targets, _, adv = _batch(seed, b, 1, v)
    mask = torch.ones(b, 1, dtype=torch.bool)
    generator_logprobs = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    generator_logprobs = generator_logprobs + torch.randn(b, 1, generator=g, dtype=torch.float64) * 0.5
    kwargs = dict(clip_low=clip[0], clip_high=clip[1], dual_clip=dual, aggregation=mode)
    grads, values = [], []
    for cls in (GRPOLoss, GSPOLoss):
        x = logits.clone().requires_grad_()
        out = cls(**kwargs)(x, targets, mask, adv, generator_logprobs)
        out.loss.backward()
        grads.append(x.grad)
        values.append(out.loss.detach())
    assert torch.allclose(values[0], values[1], atol=1e-12)
    assert torch.allclose(grads[0], grads[1], atol=1e-12)
