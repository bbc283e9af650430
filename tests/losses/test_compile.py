"""Every built-in loss compiles with torch.compile (inductor, CPU) and matches eager within 1e-6."""

from __future__ import annotations

import pytest
import torch

from losses import build_loss, loss_names

BUILTIN = ["cispo", "dapo", "grpo", "gspo", "trloo"]


@pytest.mark.slow  # ~10 s per loss on 2 cores (C++ codegen)
@pytest.mark.parametrize("name", BUILTIN)
def test_compiled_loss_matches_eager(name):
    assert name in loss_names()
    torch.manual_seed(0)
    b, t, v = 2, 4, 8
    logits = torch.randn(b, t, v)
    targets = torch.randint(0, v, (b, t))
    mask = torch.ones(b, t)
    mask[0, 2:] = 0
    adv = torch.randn(b, t)
    gen = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) + 0.3 * torch.randn(b, t)
    ref = gen + 0.1
    loss = build_loss({"name": name, "beta": 0.1, "entropy_coef": 0.01, "guards": [{"name": "tis", "cap": 1.5}]})

    def run(x):
        out = loss(x, targets, mask, adv, gen, ref)
        return out.loss, out.metrics

    compiled = torch.compile(run, backend="inductor")
    x_eager, x_comp = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    value_eager, metrics_eager = run(x_eager)
    value_comp, metrics_comp = compiled(x_comp)
    value_eager.backward()
    value_comp.backward()
    assert torch.allclose(value_eager, value_comp, atol=1e-6, rtol=0)
    assert torch.allclose(x_eager.grad, x_comp.grad, atol=1e-6, rtol=0)
    assert x_eager.grad.abs().sum() > 0
    assert metrics_eager.keys() == metrics_comp.keys()
    for key in metrics_eager:
        assert torch.allclose(metrics_eager[key], metrics_comp[key], atol=1e-6, rtol=0), key
