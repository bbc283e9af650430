"""CUDA paths of the logprob/entropy op (fused Triton kernels and the chunked op): they match the
reference and save memory; the fused kernels also at the real vocabulary size (151,936)."""

from __future__ import annotations

import pytest
import torch

from losses.ops import token_logprobs

pytestmark = pytest.mark.gpu


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch.device("cuda")


@pytest.mark.parametrize("impl", ["fused", "chunked"])
def test_bf16_logprobs_entropy_and_grad_match_reference_with_less_memory(cuda, impl):
    torch.manual_seed(0)
    b, t, v = 4, 512, 32000
    base = (torch.randn(b, t, v, device=cuda) * 3).to(torch.bfloat16)
    targets = torch.randint(0, v, (b, t), device=cuda)
    w = torch.randn(b, t, device=cuda)

    def peak_extra(fn):
        x = base.clone().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        lp, ent = fn(x)
        ((lp * w).sum() + (ent * w).sum()).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - start, lp.detach(), ent.detach(), x.grad.float()

    def reference(x):
        logp = torch.log_softmax(x.float(), -1)
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)

    def chunked(x):
        return token_logprobs(x, targets, chunk_elements=1 << 22, impl=impl)[0]

    ref_mem, ref_lp, ref_ent, ref_grad = peak_extra(reference)
    mem, lp, ent, grad = peak_extra(chunked)
    assert lp.dtype == torch.float32
    assert torch.allclose(lp, ref_lp, atol=1e-4)
    assert torch.allclose(ent, ref_ent, atol=1e-4)
    assert torch.allclose(grad, ref_grad, atol=1e-3)
    logits_bytes = base.numel() * base.element_size()
    # the reference keeps fp32 log-probs (2x the bf16 logits) besides the gradient; the chunked
    # op needs the gradient (1x) plus a few 16 MiB chunks of temporaries (7 measured on an H100)
    assert mem < logits_bytes + 16 * (1 << 22) * 4
    assert mem < ref_mem / 2


VOCAB = 151936


def _fp64_reference(base, targets, valid, temperature, g_lp, g_h):
    y = base.double().requires_grad_()
    log_p = torch.log_softmax(y / temperature, -1)
    lp = torch.where(valid, log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1), 0.0)
    h = -(log_p.exp() * log_p).sum(-1)
    torch.autograd.backward([lp, h], [g_lp.double(), g_h.double()])
    return lp.detach(), h.detach(), y.grad


@pytest.mark.parametrize("rows", [8, 512])  # 8 rows: each row's vocabulary split across programs
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fused_matches_fp64_at_real_vocab(cuda, rows, dtype):
    torch.manual_seed(rows)
    base = (torch.randn(rows, VOCAB, device=cuda) * 4).to(dtype)
    base[0, 11] = 60.0  # a peaked row
    targets = torch.randint(0, VOCAB, (rows,), device=cuda)
    targets[0] = 11
    targets[1] = -100
    g_lp, g_h = torch.randn(rows, device=cuda), torch.randn(rows, device=cuda)
    x = base.clone().requires_grad_()
    (lp, h), _ = token_logprobs(x, targets, temperature=0.7, impl="fused")
    torch.autograd.backward([lp, h], [g_lp, g_h])
    valid = targets != -100
    ref_lp, ref_h, ref_grad = _fp64_reference(base, targets.clamp(min=0), valid, 0.7, g_lp, g_h)
    assert (lp.double() - ref_lp).abs().max().item() < 1e-5
    assert (h.double() - ref_h).abs().max().item() < 1e-4
    rtol = {torch.float32: 1e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-8}[dtype]
    assert (x.grad.double() - ref_grad).abs().max().item() <= 2 * rtol * ref_grad.abs().max().item() + 1e-7


def test_fused_extra_memory_is_small_at_real_vocab(cuda):
    rows = 4096
    x = (torch.randn(rows, VOCAB, device=cuda) * 3).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, VOCAB, (rows,), device=cuda)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    (lp, h), _ = token_logprobs(x, targets, impl="fused")
    (lp.sum() + h.sum()).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - start - x.numel() * x.element_size()  # minus the gradient
    assert extra < 0.1 * (1 << 30), extra / (1 << 30)


def test_from_hidden_matches_unfused_at_real_vocab(cuda):
    from losses.ops import token_logprobs_from_hidden

    torch.manual_seed(5)
    n, d = 256, 1024
    hidden = (torch.randn(n, d, device=cuda) * 0.5).to(torch.bfloat16)
    weight = (torch.randn(VOCAB, d, device=cuda) / d**0.5).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (n,), device=cuda)
    targets[3] = -100
    g_lp, g_h = torch.randn(n, device=cuda), torch.randn(n, device=cuda)
    out = []
    for fused in (True, False):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        if fused:
            (lp, ent), _ = token_logprobs_from_hidden(h, w, targets, temperature=0.9, impl="fused")
        else:
            (lp, ent), _ = token_logprobs(h @ w.T, targets, temperature=0.9, impl="fused")
        torch.autograd.backward([lp, ent], [g_lp, g_h])
        out.append((lp.detach(), ent.detach(), h.grad.float(), w.grad.float()))
    (lp_f, h_f, dh_f, dw_f), (lp_u, h_u, dh_u, dw_u) = out
    assert torch.allclose(lp_f, lp_u, atol=1e-5, rtol=0)
    assert torch.allclose(h_f, h_u, atol=1e-4, rtol=0)
    for a, b in ((dh_f, dh_u), (dw_f, dw_u)):
        assert (a - b).abs().max().item() <= 4 * 2.0**-8 * b.abs().max().item() + 1e-6
