"""The fused logprob + entropy kernels (Triton; the interpreter on CPU) against fp64 eager math:
values and both gradients, with masks, temperature, ignore_index, every input dtype, a
non-power-of-two vocabulary and rows split across programs."""

from __future__ import annotations

import pytest
import torch

from losses.ops import token_logprobs


def _reference(logits: torch.Tensor, targets: torch.Tensor, temperature: float, ignore_index: int = -100):
    """fp64 eager math: logprob of each target (0 where ignored) and each row's entropy."""
    z = logits.double() / temperature
    logp_all = torch.log_softmax(z, -1)
    valid = targets != ignore_index
    logp = logp_all.gather(-1, torch.where(valid, targets, 0).unsqueeze(-1)).squeeze(-1) * valid
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


# (input dtype, gradient rtol): bf16/fp16 inputs are exact in fp32, so values differ from fp64
# only by fp32 rounding (logprob within 1e-5, entropy within 1e-4: the bounds). The
# gradient is computed in fp32 (absolute error ~1e-6 for |grad| ~ |g| / T ~ 5) and stored in the
# input dtype: one ulp of it relative (2^-7 bf16, 2^-10 fp16), because Triton's interpreter
# truncates fp32 -> bf16/fp16 instead of rounding (DESIGN.md); a GPU rounds (half an ulp).
CASES = [(torch.float32, 1e-5), (torch.bfloat16, 2.0**-7), (torch.float16, 2.0**-10)]


@pytest.mark.parametrize("dtype,g_rtol", CASES)
@pytest.mark.parametrize("splits", ["1", "3"])
def test_values_and_gradients_match_fp64(dtype, g_rtol, splits, monkeypatch):
    monkeypatch.setenv("FORGE_LOGPROB_SPLITS", splits)
    monkeypatch.setenv("FORGE_LOGPROB_BLOCK", "256")  # several tiles per slice: the online rescaling runs
    torch.manual_seed(0)
    b, t, v, temperature = 2, 3, 1000, 0.7
    logits = (torch.randn(b, t, v) * 4).to(dtype)
    logits[0, 0, 5] = 40.0  # one peaked row: entropy near 0 must not cancel
    targets = torch.randint(0, v, (b, t))
    targets[1, 2] = -100  # ignored position
    x = logits.clone().requires_grad_()
    (logp, entropy), _ = token_logprobs(x, targets, temperature, impl="fused")
    ref_x = logits.double().requires_grad_()
    ref_logp, ref_entropy = _reference(ref_x, targets, temperature)
    assert logp.dtype == torch.float32 and entropy.dtype == torch.float32
    assert torch.allclose(logp.double(), ref_logp, atol=1e-5, rtol=0)
    assert torch.allclose(entropy.double(), ref_entropy, atol=1e-4, rtol=0)
    assert logp[1, 2] == 0
    w_lp, w_h = torch.randn(b, t), torch.randn(b, t)
    ((logp * w_lp).sum() + (entropy * w_h).sum()).backward()
    ((ref_logp * w_lp.double()).sum() + (ref_entropy * w_h.double()).sum()).backward()
    assert x.grad.dtype == dtype
    assert torch.allclose(x.grad.double(), ref_x.grad, atol=5e-6, rtol=g_rtol)


def test_one_output_alone_and_the_chunked_op_agree():
    torch.manual_seed(1)
    logits = torch.randn(5, 777) * 3
    targets = torch.randint(0, 777, (5,))
    for which in (0, 1):
        grads = []
        for impl in ("fused", "chunked"):
            x = logits.clone().requires_grad_()
            out = token_logprobs(x, targets, 1.3, impl=impl)[0][which]
            (out * torch.arange(5.0)).sum().backward()
            grads.append(x.grad)
        assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_bad_impl_and_fp64_are_clear_errors():
    logits, targets = torch.randn(2, 10, dtype=torch.float64), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="fp64 logits need impl='chunked'"):
        token_logprobs(logits, targets, impl="fused")
    with pytest.raises(ValueError, match="impl must be 'auto', 'fused' or 'chunked', got 'fast'"):
        token_logprobs(logits, targets, impl="fast")
    (lp, _), _ = token_logprobs(logits, targets)  # auto on CPU: the chunked op keeps fp64
    assert lp.dtype == torch.float64


@pytest.mark.parametrize("dtype,g_rtol", [(torch.float32, 1e-4), (torch.bfloat16, 2.0**-6)])
def test_from_hidden_matches_fp64_without_materialising_logits(dtype, g_rtol):
    """``token_logprobs_from_hidden`` (vocabulary in chunks; a last chunk narrower than the rest)
    against fp64 ``hidden @ W.T`` then log-softmax: values and the gradients of hidden and W."""
    from losses.ops import token_logprobs_from_hidden

    torch.manual_seed(2)
    n, d, v, temperature = 6, 32, 700, 0.8
    hidden, weight = torch.randn(n, d).to(dtype), (torch.randn(v, d) * 0.3).to(dtype)
    targets = torch.randint(0, v, (n,))
    targets[3] = -100
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    (logp, entropy), _ = token_logprobs_from_hidden(h, w, targets, temperature, vocab_chunk=256)
    rh, rw = hidden.double().requires_grad_(), weight.double().requires_grad_()
    ref_logp, ref_entropy = _reference(rh @ rw.t(), targets, temperature)
    # bf16 matmul: the chunk's logits are rounded to bf16 before the kernel reads them
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(logp.double(), ref_logp, atol=tol, rtol=0)
    assert torch.allclose(entropy.double(), ref_entropy, atol=10 * tol, rtol=0)
    g1, g2 = torch.randn(n), torch.randn(n)
    ((logp * g1).sum() + (entropy * g2).sum()).backward()
    ((ref_logp * g1.double()).sum() + (ref_entropy * g2.double()).sum()).backward()
    scale_h, scale_w = rh.grad.abs().max(), rw.grad.abs().max()
    assert torch.allclose(h.grad.double(), rh.grad, atol=float(scale_h) * g_rtol, rtol=0)
    assert torch.allclose(w.grad.double(), rw.grad, atol=float(scale_w) * g_rtol, rtol=0)


def test_peaked_row_at_low_temperature_keeps_its_logprob_exact():
    # z = logits / 0.1 reaches ~1000: z[y] - lse would lose half an ulp of lse (~3e-5 in fp32)
    torch.manual_seed(3)
    logits = torch.randn(3, 500)
    logits[:, 7], logits[:, 8] = 100.0, 99.97  # two near-tied top tokens: log s ~ 0.55, not 0
    targets = torch.tensor([7, 8, 7])
    (logp, entropy), _ = token_logprobs(logits, targets, 0.1, impl="fused")
    ref_logp, ref_entropy = _reference(logits, targets, 0.1)
    assert (logp.double() - ref_logp).abs().max().item() < 1e-5
    assert (entropy.double() - ref_entropy).abs().max().item() < 1e-4


@pytest.mark.parametrize(
    "name,value,message",
    [("FORGE_LOGPROB_BLOCK", "big", "must be an integer"), ("FORGE_LOGPROB_BLOCK", "100", "power of two"),
     ("FORGE_LOGPROB_WARPS", "3", "one of 1, 2, 4"), ("FORGE_LOGPROB_SPLITS", "0", ">= 1")],
)
def test_bad_kernel_overrides_are_clear_errors(name, value, message, monkeypatch):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}.*{message}"):
        token_logprobs(torch.randn(2, 3, 64), torch.zeros(2, 3, dtype=torch.long), impl="fused")
