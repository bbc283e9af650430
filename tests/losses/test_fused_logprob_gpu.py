"""The fused logprob + entropy kernels compiled on a GPU, at the real vocabulary size: fp64
agreement, gradients, and memory beyond the logits and their gradient."""

from __future__ import annotations

import pytest
import torch

from losses.ops import token_logprobs, token_logprobs_from_hidden

pytestmark = pytest.mark.gpu
VOCAB = 151_936


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch.device("cuda")


def _fp64(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    logp = torch.log_softmax(logits.double() / temperature, -1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("rows,temperature", [(1024, 1.0), (7, 0.6)])  # 7 rows: vocabulary split across programs
def test_real_vocab_bf16_matches_fp64(cuda, rows, temperature):
    torch.manual_seed(0)
    logits = (torch.randn(rows, VOCAB, device=cuda) * 3).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (rows,), device=cuda)
    x = logits.clone().requires_grad_()
    (lp, ent), _ = token_logprobs(x, targets, temperature)  # auto: fused on CUDA
    ref_x = logits.double().requires_grad_()
    ref_lp, ref_ent = _fp64(ref_x, targets, temperature)
    assert (lp.double() - ref_lp).abs().max() < 1e-5
    assert (ent.double() - ref_ent).abs().max() < 1e-4
    w = torch.randn(rows, device=cuda, dtype=torch.float64)
    ((lp.double() * w).sum() + (ent.double() * w).sum()).backward()
    ((ref_lp * w).sum() + (ref_ent * w).sum()).backward()
    # the gradient is rounded to bf16 (half an ulp: 2^-9 relative) after fp32 math
    assert torch.allclose(x.grad.double(), ref_x.grad, rtol=2.0**-8, atol=1e-7)


def test_memory_beyond_logits_and_gradient_is_small(cuda):
    rows = 4096
    logits = torch.randn(rows, VOCAB, device=cuda).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, VOCAB, (rows,), device=cuda)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    (lp, ent), _ = token_logprobs(logits, targets)
    (lp.sum() + ent.sum()).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - logits.numel() * logits.element_size()
    assert extra < 0.1 * 2**30


def test_from_hidden_matches_the_unfused_path(cuda):
    torch.manual_seed(0)
    n, d = 1024, 1024
    hidden = torch.randn(n, d, device=cuda).to(torch.bfloat16)
    weight = (torch.randn(VOCAB, d, device=cuda) * d ** -0.5).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (n,), device=cuda)
    g = torch.randn(n, device=cuda)
    results = []
    for fused in (False, True):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        if fused:
            (lp, ent), _ = token_logprobs_from_hidden(h, w, targets)
        else:
            (lp, ent), _ = token_logprobs(h @ w.t(), targets)
        ((lp * g).sum() + (ent * g).sum()).backward()
        results.append((lp, ent, h.grad.float(), w.grad.float()))
    (lp0, ent0, dh0, dw0), (lp1, ent1, dh1, dw1) = results
    # the same bf16 logits tiles either way (cuBLAS may pick different kernels per shape)
    assert (lp0 - lp1).abs().max() < 2e-2 and (ent0 - ent1).abs().max() < 2e-2
    assert (dh0 - dh1).abs().max() < 2e-2 * dh0.abs().max()
    assert (dw0 - dw1).abs().max() < 2e-2 * dw0.abs().max()
