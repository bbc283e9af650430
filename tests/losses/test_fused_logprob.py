"""The fused Triton logprob/entropy kernels against fp64 eager math (CPU: Triton's interpreter).

tests/conftest.py switches the interpreter on (before torch imports triton) on machines without
an NVIDIA GPU; on a GPU machine these tests run the compiled kernels on CUDA tensors instead.
Shapes are small and blocks few, so each test takes well under a second on the interpreter.

Tolerances: fp32 accumulation over V <= 1000 terms keeps logprob and entropy within ~1e-6 of
fp64 (asserted at 1e-5 / 1e-4, the issue's bounds); gradients come back in the logits' dtype,
so they are compared at that dtype's rounding (bf16: 2^-8 relative, plus the interpreter's
truncating fp32 -> bf16 cast, 2^-7) of the largest gradient entry.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from losses.fused_logprob import (
    CPU_CONFIG,
    GPU_CONFIG,
    KernelConfig,
    default_config,
    fused_target_logprobs,
    interpreter_on,
)
from losses.ops import token_logprobs

DEVICE = torch.device("cuda" if torch.cuda.is_available() and not interpreter_on() else "cpu")
if DEVICE.type == "cpu" and not interpreter_on():
    pytest.skip("CPU runs of Triton kernels need TRITON_INTERPRET=1 before torch is imported",
                allow_module_level=True)

GRAD_RTOL = {torch.float32: 1e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def reference(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor, temperature: float):
    """fp64 eager math: ``(logp, entropy)`` with ``logp = 0`` on invalid rows."""
    log_p = torch.log_softmax(logits.double() / temperature, -1)
    logp = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, logp, torch.zeros_like(logp)), -(log_p.exp() * log_p).sum(-1)


def check(base, targets, valid, temperature, config, which=("logp", "entropy")):
    torch.manual_seed(123)
    x = base.clone().requires_grad_()
    logp, ent = fused_target_logprobs(x, targets, valid, temperature, config)
    assert logp.dtype == ent.dtype == torch.float32
    w_lp, w_h = torch.randn_like(logp), torch.randn_like(ent)
    loss = sum((o * w).sum() for name, o, w in (("logp", logp, w_lp), ("entropy", ent, w_h)) if name in which)
    loss.backward()

    y = base.detach().double().requires_grad_()
    ref_lp, ref_h = reference(y, targets, valid, temperature)
    ref_loss = sum((o * w.double()).sum() for name, o, w in (("logp", ref_lp, w_lp), ("entropy", ref_h, w_h))
                   if name in which)
    ref_loss.backward()

    assert torch.isfinite(logp).all() and torch.isfinite(ent).all()
    assert (logp.double() - ref_lp).abs().max().item() < 1e-5
    assert (ent.double() - ref_h).abs().max().item() < 1e-4
    assert (logp[~valid] == 0).all()
    assert x.grad.dtype == base.dtype
    scale = y.grad.abs().max().item()
    assert scale > 0
    err = (x.grad.double() - y.grad).abs().max().item()
    assert err <= 2 * GRAD_RTOL[base.dtype] * scale + 1e-7, (err, scale)


SMALL = KernelConfig(fwd_block=128, fwd_warps=1, bwd_block=256, bwd_warps=1, min_programs=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("variant", [{}, {"fwd_lane_sums": 1, "fwd_prefetch": 1, "bwd_prefetch": 1}])
def test_matches_fp64_with_mask_temperature_and_split_rows(dtype, splits, variant):
    torch.manual_seed(0)
    rows, vocab = 6, 1000  # non-power-of-two vocab: partial last block in every split
    base = (torch.randn(rows, vocab) * 4).to(dtype).to(DEVICE)
    base[1, 7] = 40.0  # a peaked row: entropy near 0, where lse - E[z] would cancel
    targets = torch.randint(0, vocab, (rows,), device=DEVICE)
    targets[1] = 7
    valid = torch.tensor([True, True, False, True, True, False], device=DEVICE)
    check(base, targets, valid, 0.7, KernelConfig(**{**SMALL.__dict__, "splits": splits, **variant}))


@pytest.mark.parametrize("which", [("logp",), ("entropy",)])
def test_one_output_alone_gets_the_right_gradient(which):
    torch.manual_seed(1)
    base = torch.randn(4, 300, device=DEVICE) * 2
    targets = torch.randint(0, 300, (4,), device=DEVICE)
    valid = torch.tensor([True, False, True, True], device=DEVICE)
    check(base, targets, valid, 1.6, KernelConfig(**{**SMALL.__dict__, "splits": 2}), which)


def test_auto_split_spreads_few_rows_and_a_strided_view_works():
    torch.manual_seed(2)
    wide = torch.randn(3, 2 * 513, device=DEVICE) * 3
    base = wide[:, ::2]  # stride 2 along the vocab: copied to unit stride
    targets = torch.tensor([0, 512, 100], device=DEVICE)
    valid = torch.ones(3, dtype=torch.bool, device=DEVICE)
    # min_programs = 12 over 3 rows -> 4 programs per row (blocks of 128 over 513 entries)
    check(base, targets, valid, 1.0, KernelConfig(**{**SMALL.__dict__, "min_programs": 12}))


def test_sliced_3d_logits_are_read_in_place_and_get_their_gradient():
    from losses.fused_logprob import row_layout

    torch.manual_seed(5)
    full = (torch.randn(2, 5, 200, device=DEVICE) * 3).to(torch.bfloat16)
    sliced = full[:, :-1]  # [2, 4, 200]: not viewable as [8, 200]
    x, inner, s_outer, s_inner = row_layout(sliced)
    assert x.data_ptr() == full.data_ptr() and (inner, s_outer, s_inner) == (4, 1000, 200)
    targets = torch.randint(0, 200, (2, 4), device=DEVICE)
    targets[1, 3] = -100
    leaf = full.clone().requires_grad_()
    (logp, ent), _ = token_logprobs(leaf[:, :-1], targets, temperature=1.2, impl="fused")
    (logp.sum() + ent.sum()).backward()
    ref_leaf = full.double().requires_grad_()
    valid = targets != -100
    ref_lp, ref_h = reference(ref_leaf[:, :-1], targets.clamp(min=0), valid, 1.2)
    (ref_lp.sum() + ref_h.sum()).backward()
    assert (logp.double() - ref_lp).abs().max().item() < 1e-5
    assert (ent.double() - ref_h).abs().max().item() < 1e-4
    assert (leaf.grad[:, -1] == 0).all()
    scale = ref_leaf.grad.abs().max().item()
    assert (leaf.grad.double() - ref_leaf.grad).abs().max().item() <= 2 * GRAD_RTOL[torch.bfloat16] * scale


def test_token_logprobs_fused_matches_chunked_with_ignore_index():
    torch.manual_seed(3)
    base = (torch.randn(2, 3, 77) * 3).to(torch.bfloat16).to(DEVICE)
    targets = torch.randint(0, 77, (2, 3), device=DEVICE)
    targets[0, 2] = -1
    out = {}
    for impl in ("fused", "chunked"):
        x = base.clone().requires_grad_()
        (logp, ent), metrics = token_logprobs(x, targets, temperature=0.9, ignore_index=-1, impl=impl)
        (logp.sum() + 0.5 * ent.sum()).backward()
        out[impl] = (logp.detach(), ent.detach(), x.grad.float(), metrics["loss/entropy"])
    assert out["fused"][0][0, 2] == 0
    for a, b in zip(out["fused"], out["chunked"]):
        assert torch.allclose(a, b, atol=1e-5, rtol=0) or torch.allclose(a, b, atol=2**-7, rtol=2**-7)


def test_config_validation_and_env_overrides(monkeypatch):
    with pytest.raises(ValueError, match="fwd_block must be a power of two"):
        fused_target_logprobs(torch.zeros(1, 4, device=DEVICE), torch.zeros(1, dtype=torch.long, device=DEVICE),
                              torch.ones(1, dtype=torch.bool, device=DEVICE), 1.0, KernelConfig(fwd_block=100))
    with pytest.raises(ValueError, match="fp32/bf16/fp16"):
        fused_target_logprobs(torch.zeros(1, 4, dtype=torch.float64), torch.zeros(1, dtype=torch.long),
                              torch.ones(1, dtype=torch.bool), 1.0)
    with pytest.raises(ValueError, match="impl must be"):
        bad_impl: Any = "triton"
        token_logprobs(torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.long), impl=bad_impl)
    monkeypatch.setenv("FORGE_LOGPROB_BWD_WARPS", "4")
    monkeypatch.setenv("FORGE_LOGPROB_SPLITS", "2")
    config = default_config(torch.device("cuda"))
    assert (config.bwd_warps, config.splits, config.fwd_block) == (4, 2, GPU_CONFIG.fwd_block)
    assert default_config(torch.device("cpu")).fwd_block == CPU_CONFIG.fwd_block
    monkeypatch.setenv("FORGE_LOGPROB_FWD_BLOCK", "big")
    with pytest.raises(ValueError, match="FORGE_LOGPROB_FWD_BLOCK must be an integer"):
        default_config(torch.device("cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_from_hidden_matches_unfused_logits_path(dtype):
    from losses.ops import token_logprobs_from_hidden

    torch.manual_seed(4)
    b, t, d, vocab = 2, 3, 16, 300
    hidden = (torch.randn(b, t, d) * 0.5).to(dtype).to(DEVICE)
    weight = torch.randn(vocab, d).to(dtype).to(DEVICE)
    targets = torch.randint(0, vocab, (b, t), device=DEVICE)
    targets[1, 0] = -100
    w_lp, w_h = torch.randn(b, t, device=DEVICE), torch.randn(b, t, device=DEVICE)
    results = []
    for fused in (True, False):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        if fused:  # 3 vocab chunks of 128/128/44 rows of the head
            (logp, ent), _ = token_logprobs_from_hidden(h, w, targets, temperature=0.8, chunk_vocab=128, impl="fused")
        else:
            (logp, ent), _ = token_logprobs(h @ w.T, targets, temperature=0.8, impl="chunked")
        ((logp * w_lp).sum() + (ent * w_h).sum()).backward()
        results.append((logp.detach(), ent.detach(), h.grad.float(), w.grad.float()))
    (lp_f, h_f, dh_f, dw_f), (lp_u, h_u, dh_u, dw_u) = results
    assert torch.allclose(lp_f, lp_u, atol=1e-5, rtol=0) and torch.allclose(h_f, h_u, atol=1e-4, rtol=0)
    assert lp_f[1, 0] == 0
    rtol = GRAD_RTOL[dtype]
    for fused_grad, unfused_grad in ((dh_f, dh_u), (dw_f, dw_u)):
        scale = unfused_grad.abs().max().item()
        assert scale > 0
        # bf16: each path rounds its logits' gradient to bf16 before its matmul; sums of d terms
        assert (fused_grad - unfused_grad).abs().max().item() <= 4 * rtol * scale + 1e-6


@pytest.mark.slow  # ~6 s on the interpreter
def test_bench_quick_prints_the_json_line(capsys):
    import json

    from bench.logprob import main

    main(["--quick"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["bench"] == "logprob" and result["dtype"] == "bfloat16"
    for key in ("fwd_ms", "fwd_bwd_ms", "eager_fwd_ms", "eager_fwd_bwd_ms", "fwd_gbps", "bwd_gbps"):
        assert result[key] > 0, key
    assert result["logprob_max_err"] < 1e-5 and result["entropy_max_err"] < 1e-4
    assert result["fused_lm_head"]["fused_fwd_bwd_ms"] > 0
