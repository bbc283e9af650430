"""Memory-aware target-token logprobs and entropy from logits (a custom autograd function).

The obvious ``logits.float().log_softmax(-1).gather(...)`` materialises an fp32 copy of the
whole ``[N, V]`` logits tensor and autograd keeps it for the backward pass (9.3 GiB for
8192 x 151936 bf16 logits on an H100). Here the forward pass walks the rows in chunks, upcasts
only one chunk at a time and keeps just two fp32 numbers per row (log-sum-exp and entropy);
the backward pass recomputes the softmax chunk by chunk from the saved (original dtype) logits.
Extra memory is one chunk of fp32 temporaries plus the gradient itself.

With ``z = logits / T`` and ``p = softmax(z)``:

* ``logp[y] = z[y] - logsumexp(z)``;            ``d logp[y] / dz = onehot(y) - p``
* ``H = -sum(p * log p)``;                      ``dH / dz = -p * (log p + H)``
"""

from __future__ import annotations

from typing import Any

import torch

# fp32 elements per chunk of rows (64 MiB): large enough to keep kernels efficient, small
# enough that the temporaries stay negligible next to the logits themselves.
DEFAULT_CHUNK_ELEMENTS = 1 << 24


def _math_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least fp32 (bf16/fp16 logits are upcast chunk by chunk; fp64 stays fp64)."""
    return torch.promote_types(dtype, torch.float32)


def _row_chunks(num_rows: int, vocab: int, chunk_elements: int) -> list[tuple[int, int]]:
    rows = max(1, chunk_elements // max(vocab, 1))
    return [(s, min(s + rows, num_rows)) for s in range(0, num_rows, rows)]


class TargetLogprobsAndEntropy(torch.autograd.Function):
    """``(logits [N, V], targets [N], valid [N]) -> (logp [N], entropy [N])`` in fp32 (or fp64).

    ``targets`` must already be in ``[0, V)``; rows where ``valid`` is False get ``logp = 0``
    and no gradient through ``logp`` (their entropy is still computed).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        logits: torch.Tensor,
        targets: torch.Tensor,
        valid: torch.Tensor,
        temperature: float,
        chunk_elements: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        num_rows, vocab = logits.shape
        dtype = _math_dtype(logits.dtype)
        lse = torch.empty(num_rows, dtype=dtype, device=logits.device)
        entropy = torch.empty(num_rows, dtype=dtype, device=logits.device)
        target_logit = torch.empty(num_rows, dtype=dtype, device=logits.device)
        for start, end in _row_chunks(num_rows, vocab, chunk_elements):
            z = logits[start:end].to(dtype) / temperature
            chunk_lse = torch.logsumexp(z, dim=-1)
            log_p = z - chunk_lse.unsqueeze(-1)
            lse[start:end] = chunk_lse
            # -sum p log p, not lse - sum p z: the latter cancels badly for peaked rows
            entropy[start:end] = -(torch.exp(log_p) * log_p).sum(-1)
            target_logit[start:end] = z.gather(-1, targets[start:end].unsqueeze(-1)).squeeze(-1)
        logp = torch.where(valid, target_logit - lse, torch.zeros_like(lse))
        ctx.save_for_backward(logits, targets, valid, lse, entropy)
        ctx.temperature = temperature
        ctx.chunk_elements = chunk_elements
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, None, None]:
        logits, targets, valid, lse, entropy = ctx.saved_tensors
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None
        temperature = ctx.temperature
        num_rows, vocab = logits.shape
        dtype = lse.dtype
        grad_logits = torch.empty_like(logits)
        if grad_logp is not None:
            grad_logp = torch.where(valid, grad_logp.to(dtype), torch.zeros_like(grad_logp, dtype=dtype))
        for start, end in _row_chunks(num_rows, vocab, ctx.chunk_elements):
            # in-place where possible: a handful of chunk-sized temporaries at most
            log_p = logits[start:end].to(dtype) / temperature
            log_p.sub_(lse[start:end].unsqueeze(-1))
            p = torch.exp(log_p)
            if grad_logp is not None:
                g = grad_logp[start:end].unsqueeze(-1)
                grad_z = p * -g
                grad_z.scatter_add_(-1, targets[start:end].unsqueeze(-1), g)
            else:
                grad_z = torch.zeros_like(p)
            if grad_entropy is not None:
                g_h = grad_entropy[start:end].to(dtype).unsqueeze(-1)
                grad_z.sub_(log_p.add_(entropy[start:end].unsqueeze(-1)).mul_(p).mul_(g_h))
            grad_logits[start:end] = grad_z.div_(temperature)
        return grad_logits, None, None, None, None
