"""Fused Triton kernels for target-token logprobs and entropy: one read of the logits forward,
one read and one write backward, and nothing of size ``[N, V]`` besides the gradient itself.

With ``z = logits / T``, ``p = softmax(z)``, ``lse = logsumexp(z)``:

* forward: each program streams one slice of one row's vocabulary with an online log-sum-exp,
  keeping three fp32 numbers: the running max ``m``, ``s = sum exp(z - m)`` and
  ``t = sum exp(z - m) * (z - m)``. Partials of a row's slices combine exactly (rebased to the
  largest ``m``), giving ``lse = m + log s`` and the entropy ``H = log s - t / s``, computed
  relative to the max so a peaked row does not cancel ``lse`` against ``E[z]``. The target's
  logit is one gather: ``logp = (z[y] - m) - log s`` -- exact when the target is the max, where
  ``z[y] - lse`` would lose half an ulp of ``lse`` (3e-5 at ``|z|`` ~ 1000, e.g. a peaked row
  at a low temperature).
* backward: ``dlogp/dz = onehot(y) - p`` and ``dH/dz = -p (log p + H)``, so each element's
  gradient needs only its own logit and the row's ``lse`` and ``H``: one pass writes it in the
  logits' dtype.

Rows are split into ``splits`` slices when there are few rows, so a handful of long rows still
fill the GPU. On CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``), which
the tests use at small shapes; :func:`losses.ops.token_logprobs` falls back to the chunked torch
op where Triton cannot run. Block sizes and splits are data (:class:`KernelConfig`) so a sweep
can override them (``FORGE_LOGPROB_BLOCK``, ``FORGE_LOGPROB_WARPS``, ``FORGE_LOGPROB_SPLITS``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

__all__ = ["KernelConfig", "FusedTargetLogprobsAndEntropy", "fused_token_logprobs", "kernel_config"]


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters: elements per tile, warps per program, vocabulary slices per row."""

    block: int
    num_warps: int
    splits: int


def kernel_config(num_rows: int, vocab: int, device: torch.device) -> KernelConfig:
    """The launch for ``[num_rows, vocab]`` logits on ``device`` (env overrides for sweeps)."""
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        block, warps = 8192, 8  # best of a 4x3 sweep on the H100 (bench/RESULTS.md)
        splits = max(1, min(triton.cdiv(4 * sms, max(num_rows, 1)), triton.cdiv(vocab, block)))
    else:  # the interpreter: ~0.5 ms per program instance, so few, large blocks
        block, warps, splits = min(triton.next_power_of_2(vocab), 4096), 1, 1
    block = _env_int("FORGE_LOGPROB_BLOCK", block)
    warps = _env_int("FORGE_LOGPROB_WARPS", warps)
    splits = _env_int("FORGE_LOGPROB_SPLITS", splits)
    if block < 16 or block & (block - 1):
        raise ValueError(f"FORGE_LOGPROB_BLOCK must be a power of two >= 16, got {block}")
    if warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"FORGE_LOGPROB_WARPS must be one of 1, 2, 4, 8, 16, 32; got {warps}")
    if splits < 1:
        raise ValueError(f"FORGE_LOGPROB_SPLITS must be >= 1, got {splits}")
    return KernelConfig(block, warps, max(1, min(splits, triton.cdiv(vocab, block))))


def _env_int(name: str, default: int) -> int:
    """An integer override from the environment (sweeps), or ``default``; a clear error if bad."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


@triton.jit
def _forward_partials(logits_ptr, row_stride, vocab, slice_len, inv_temp,
                      m_ptr, s_ptr, t_ptr, splits, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    start = part * slice_len
    end = tl.minimum(start + slice_len, vocab)
    base = logits_ptr + row * row_stride
    m = -1e30  # finite "minus infinity": keeps exp(m_old - m_new) and (m_old - m_new) * s finite
    s = 0.0
    t = 0.0
    for off in range(start, end, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < end
        z = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32) * inv_temp
        z = tl.where(mask, z, -1e30)
        m_new = tl.maximum(m, tl.max(z, axis=0))
        d = z - m_new
        e = tl.where(mask, tl.exp(d), 0.0)
        scale = tl.exp(m - m_new)
        # t is relative to the max: rebase the old sum to m_new before adding this tile
        t = scale * (t + (m - m_new) * s) + tl.sum(e * tl.where(mask, d, 0.0), axis=0)
        s = scale * s + tl.sum(e, axis=0)
        m = m_new
    out = row * splits + part
    tl.store(m_ptr + out, m)
    tl.store(s_ptr + out, s)
    tl.store(t_ptr + out, t)


@triton.jit
def _backward(logits_ptr, row_stride, grad_ptr, grad_stride, vocab, slice_len, inv_temp,
              lse_ptr, entropy_ptr, targets_ptr, g_logp_ptr, g_entropy_ptr,
              HAS_G_LOGP: tl.constexpr, HAS_G_ENTROPY: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    start = part * slice_len
    end = tl.minimum(start + slice_len, vocab)
    lse = tl.load(lse_ptr + row)
    if HAS_G_LOGP:
        g_logp = tl.load(g_logp_ptr + row)
        target = tl.load(targets_ptr + row)
    if HAS_G_ENTROPY:
        g_h = tl.load(g_entropy_ptr + row)
        h = tl.load(entropy_ptr + row)
    for off in range(start, end, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < end
        log_p = tl.load(logits_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32) * inv_temp - lse
        p = tl.exp(log_p)
        grad = tl.zeros([BLOCK], dtype=tl.float32)
        if HAS_G_LOGP:
            grad += g_logp * (tl.where(cols == target, 1.0, 0.0) - p)
        if HAS_G_ENTROPY:
            grad -= g_h * p * (log_p + h)
        tl.store(grad_ptr + row * grad_stride + cols, (grad * inv_temp).to(grad_ptr.dtype.element_ty), mask=mask)


def _launch_grid(num_rows: int, cfg: KernelConfig, vocab: int) -> tuple[tuple[int, int], int]:
    slice_len = triton.cdiv(triton.cdiv(vocab, cfg.splits), cfg.block) * cfg.block
    return (num_rows, triton.cdiv(vocab, slice_len)), slice_len


class FusedTargetLogprobsAndEntropy(torch.autograd.Function):
    """``(logits [N, V], targets [N], valid [N], temperature) -> (logp [N], entropy [N])`` (fp32).

    Same contract as :class:`losses.logprob_function.TargetLogprobsAndEntropy`: ``targets`` in
    ``[0, V)``; rows where ``valid`` is False get ``logp = 0`` and no gradient through it (their
    entropy is still computed). Logits may be bf16, fp16 or fp32; the math is fp32.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor,  # type: ignore[override]
                temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        num_rows, vocab = logits.shape
        cfg = kernel_config(num_rows, vocab, logits.device)
        grid, slice_len = _launch_grid(num_rows, cfg, vocab)
        partial = torch.empty(3, num_rows, grid[1], dtype=torch.float32, device=logits.device)
        inv_temp = 1.0 / temperature
        if num_rows:
            _forward_partials[grid](logits, logits.stride(0), vocab, slice_len, inv_temp,
                                    partial[0], partial[1], partial[2], grid[1],
                                    BLOCK=cfg.block, num_warps=cfg.num_warps)
        m, s, t = partial
        top = m.max(dim=1, keepdim=True).values
        w = torch.exp(m - top)
        total_s = (s * w).sum(1)
        total_t = (w * (t + (m - top) * s)).sum(1)
        log_s = torch.log(total_s)
        lse = top.squeeze(1) + log_s
        entropy = log_s - total_t / total_s
        target_z = logits.gather(1, targets.unsqueeze(1)).squeeze(1).float() * inv_temp
        logp = torch.where(valid, (target_z - top.squeeze(1)) - log_s, torch.zeros_like(lse))
        ctx.save_for_backward(logits, targets, valid, lse, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor | None,  # type: ignore[override]
                 grad_entropy: torch.Tensor | None) -> tuple[torch.Tensor | None, None, None, None]:
        logits, targets, valid, lse, entropy = ctx.saved_tensors
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None
        num_rows, vocab = logits.shape
        grad_logits = torch.empty_like(logits, memory_format=torch.contiguous_format)
        if grad_logp is not None:
            grad_logp = torch.where(valid, grad_logp.float(), torch.zeros_like(lse)).contiguous()
        if grad_entropy is not None:
            grad_entropy = grad_entropy.float().contiguous()
        cfg = kernel_config(num_rows, vocab, logits.device)
        grid, slice_len = _launch_grid(num_rows, cfg, vocab)
        if num_rows:
            _backward[grid](logits, logits.stride(0), grad_logits, grad_logits.stride(0), vocab, slice_len,
                            1.0 / ctx.temperature, lse, entropy, targets,
                            lse if grad_logp is None else grad_logp, lse if grad_entropy is None else grad_entropy,
                            HAS_G_LOGP=grad_logp is not None, HAS_G_ENTROPY=grad_entropy is not None,
                            BLOCK=cfg.block, num_warps=cfg.num_warps)
        return grad_logits, None, None, None


def fused_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor,
                         temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply :class:`FusedTargetLogprobsAndEntropy` to ``[N, V]`` logits."""
    return FusedTargetLogprobsAndEntropy.apply(logits, targets, valid, float(temperature))
