"""Logprob + entropy straight from last hidden states and the LM head, never materialising [N, V].

The vocabulary is walked in chunks of ``chunk_vocab`` rows of the LM head: each chunk's logits
``hidden @ W_c^T`` (``[N, chunk]``, in the hidden states' dtype, exactly what the unfused
``hidden @ W^T`` computes for those columns) go through the fused stats kernel of
:mod:`losses.fused_logprob`, whose per-chunk ``(max, sum exp, sum exp * z)`` merge into the
row's log-sum-exp and entropy. The backward pass recomputes each chunk's logits, writes its
``dlogits`` with the fused gradient kernel, and accumulates ``dH += dlogits_c @ W_c`` (fp32) and
``dW_c = dlogits_c^T @ H``. Extra memory: one chunk of logits and one of their gradient, plus
an fp32 ``[N, d]`` accumulator -- at N = 8192, d = 4096, chunk = 8192: about 0.4 GiB.

Cost: the backward recomputes the forward's matmul, so it does 4 matmuls where the unfused path
does 3 (the recompute is the price of never storing ``[N, V]``; Liger's and Apple's fused
cross-entropies pay it too).
"""

from __future__ import annotations

from typing import Any

import torch

from losses.fused_logprob import (
    KernelConfig,
    default_config,
    logprob_lse_and_entropy,
    merge_stats,
    row_stats,
    write_grad,
)

DEFAULT_CHUNK_VOCAB = 8192


def _chunks(vocab: int, chunk_vocab: int) -> list[tuple[int, int]]:
    return [(s, min(s + chunk_vocab, vocab)) for s in range(0, vocab, chunk_vocab)]


class LinearTargetLogprobsAndEntropy(torch.autograd.Function):
    """``(hidden [N, d], weight [V, d], targets [N], valid [N]) -> (logp [N], entropy [N])``, fp32.

    ``targets`` already in ``[0, V)``; rows where ``valid`` is False get ``logp = 0`` and no
    gradient through it.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        valid: torch.Tensor,
        temperature: float,
        chunk_vocab: int,
        config: KernelConfig | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        config = config or default_config(hidden.device)
        num_rows = hidden.shape[0]
        chunks = _chunks(weight.shape[0], chunk_vocab)
        parts = torch.empty(3, num_rows, len(chunks), dtype=torch.float32, device=hidden.device)
        target_z = torch.zeros(num_rows, dtype=torch.float32, device=hidden.device)
        for i, (start, end) in enumerate(chunks):
            logits = hidden @ weight[start:end].T
            m, l, a = row_stats(logits, temperature, config)
            parts[0, :, i], parts[1, :, i], parts[2, :, i] = m, l, a
            inside = (targets >= start) & (targets < end)
            local = (targets - start).clamp(0, end - start - 1).unsqueeze(-1)
            target_z = torch.where(inside, logits.gather(-1, local).squeeze(-1).float(), target_z)
            del logits
        logp, lse, entropy = logprob_lse_and_entropy(target_z * (1.0 / temperature),
                                                     *merge_stats(parts[0], parts[1], parts[2]))
        logp = torch.where(valid, logp, torch.zeros_like(logp))
        ctx.save_for_backward(hidden, weight, targets, valid, lse, entropy)
        ctx.temperature, ctx.chunk_vocab, ctx.config = temperature, chunk_vocab, config
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None, None, None]:
        hidden, weight, targets, valid, lse, entropy = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if (grad_logp is None and grad_entropy is None) or not (want_h or want_w):
            return None, None, None, None, None, None, None
        zeros = torch.zeros_like(lse)
        g_lp = zeros if grad_logp is None else torch.where(valid, grad_logp.float(), zeros).contiguous()
        g_h = zeros if grad_entropy is None else grad_entropy.float().contiguous()
        grad_hidden = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if want_h else None
        grad_weight = torch.empty_like(weight) if want_w else None
        for start, end in _chunks(weight.shape[0], ctx.chunk_vocab):
            w_c = weight[start:end]
            logits = hidden @ w_c.T
            # targets outside this chunk become -1: no column matches, no one-hot term
            local = torch.where((targets >= start) & (targets < end), targets - start, torch.full_like(targets, -1))
            grad = write_grad(logits, torch.empty_like(logits), local.contiguous(), lse, entropy, g_lp, g_h,
                              ctx.temperature, ctx.config)
            del logits
            if grad_hidden is not None:
                grad_hidden += grad @ w_c
            if grad_weight is not None:
                torch.matmul(grad.T, hidden, out=grad_weight[start:end])
        if grad_hidden is not None:
            grad_hidden = grad_hidden.to(hidden.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None
