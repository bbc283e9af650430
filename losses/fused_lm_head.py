"""Logprob + entropy straight from the last hidden states and the LM head, never holding the
``[N, V]`` logits: the vocabulary is walked in chunks of ``chunk`` columns.

Forward, per chunk: ``z_c = hidden @ W_c^T`` (``[N, chunk]``, the model's dtype), then the fused
forward kernel's online log-sum-exp partials (:mod:`losses.fused_logprob`), merged into running
per-row ``(m, s, t)``; the target logit is picked from the chunk that holds it. Backward, per
chunk: recompute ``z_c``, write its gradient with the fused backward kernel, then
``dH += dz_c @ W_c`` (accumulated in fp32) and ``dW_c = dz_c^T @ hidden``. Extra memory is two
chunk-sized buffers and an fp32 ``[N, d]`` accumulator (plus ``dW`` itself, which any backward
needs), instead of ``[N, V]`` logits and their gradient.

The price is one more matmul: the logits are recomputed in the backward pass (4 matmul passes
against the unfused path's 3). The gradient of the logits depends on each row's upstream
gradient, so it cannot be formed in the forward pass as fused cross-entropy does for a scalar loss.
"""

from __future__ import annotations

from typing import Any

import torch

from losses.fused_logprob import _backward, _forward_partials, kernel_config

__all__ = ["FusedLinearLogprobsAndEntropy", "DEFAULT_VOCAB_CHUNK"]

DEFAULT_VOCAB_CHUNK = 16384


def _merge(acc: tuple[torch.Tensor, torch.Tensor, torch.Tensor], part: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Combine running per-row ``(m, s, t)`` with a chunk's partials (``part``: [3, N, 1])."""
    m, s, t = acc
    pm, ps, pt = part[0, :, 0], part[1, :, 0], part[2, :, 0]
    top = torch.maximum(m, pm)
    wa, wb = torch.exp(m - top), torch.exp(pm - top)
    t = wa * (t + (m - top) * s) + wb * (pt + (pm - top) * ps)
    return top, wa * s + wb * ps, t


class FusedLinearLogprobsAndEntropy(torch.autograd.Function):
    """``(hidden [N, d], weight [V, d], targets [N], valid [N], temperature, chunk)`` ->
    ``(logp [N], entropy [N])`` in fp32, with gradients for ``hidden`` and ``weight``."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,  # type: ignore[override]
                valid: torch.Tensor, temperature: float, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
        num_rows, vocab = hidden.shape[0], weight.shape[0]
        inv_temp = 1.0 / temperature
        dev = hidden.device
        m = torch.full((num_rows,), -1e30, dtype=torch.float32, device=dev)
        s = torch.zeros(num_rows, dtype=torch.float32, device=dev)
        t = torch.zeros(num_rows, dtype=torch.float32, device=dev)
        target_z = torch.zeros(num_rows, dtype=torch.float32, device=dev)
        part = torch.empty(3, num_rows, 1, dtype=torch.float32, device=dev)
        rows = torch.arange(num_rows, device=dev)
        for v0 in range(0, vocab, chunk):
            z = hidden @ weight[v0: v0 + chunk].t()
            width = z.shape[1]
            cfg = kernel_config(num_rows, width, dev)
            if num_rows:
                _forward_partials[(num_rows, 1)](z, z.stride(0), width, width, inv_temp, part[0], part[1], part[2], 1,
                                                 BLOCK=cfg.block, num_warps=cfg.num_warps)
            m, s, t = _merge((m, s, t), part)
            inside = (targets >= v0) & (targets < v0 + width)
            local = (targets - v0).clamp(0, width - 1)
            target_z = torch.where(inside, z[rows, local].float() * inv_temp, target_z)
        log_s = torch.log(s)
        lse = m + log_s
        entropy = log_s - t / s
        # (z[y] - m) - log s, not z[y] - lse: exact for a peaked row whose target is the max
        logp = torch.where(valid, (target_z - m) - log_s, torch.zeros_like(lse))
        ctx.save_for_backward(hidden, weight, targets, valid, lse, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor | None,  # type: ignore[override]
                 grad_entropy: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, valid, lse, entropy = ctx.saved_tensors
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None, None
        num_rows, vocab = hidden.shape[0], weight.shape[0]
        if grad_logp is not None:
            grad_logp = torch.where(valid, grad_logp.float(), torch.zeros_like(lse)).contiguous()
        if grad_entropy is not None:
            grad_entropy = grad_entropy.float().contiguous()
        grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
        grad_weight = torch.empty_like(weight)
        for v0 in range(0, vocab, ctx.chunk):
            w = weight[v0: v0 + ctx.chunk]
            z = hidden @ w.t()
            width = z.shape[1]
            cfg = kernel_config(num_rows, width, hidden.device)
            if num_rows:
                _backward[(num_rows, 1)](z, z.stride(0), z, z.stride(0), width, width, 1.0 / ctx.temperature,
                                         lse, entropy, targets - v0,
                                         lse if grad_logp is None else grad_logp,
                                         lse if grad_entropy is None else grad_entropy,
                                         HAS_G_LOGP=grad_logp is not None, HAS_G_ENTROPY=grad_entropy is not None,
                                         BLOCK=cfg.block, num_warps=cfg.num_warps)  # in place: z becomes dz
            grad_hidden += (z @ w).float()
            grad_weight[v0: v0 + width] = z.t() @ hidden
        return grad_hidden.to(hidden.dtype), grad_weight, None, None, None, None
