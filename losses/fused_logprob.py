"""Fused Triton kernels for target-token logprob and entropy (one read of the logits forward).

With ``z = logits / T``, ``p = softmax(z)``, ``lse = logsumexp(z)``:

* forward: one pass over each row's vocabulary keeps a running max ``m``, ``l = sum exp(z - m)``
  and ``a = sum exp(z - m) * (z - m)`` (rescaled online when ``m`` grows), so
  ``lse = m + log l`` and ``H = -sum p log p = log l - a / l`` -- relative to the max, so a
  peaked row does not cancel ``lse - E[z]`` at large ``|z|``. When rows are few, each row's
  vocabulary is split across several programs and the partial ``(m, l, a)`` are merged on the
  host side (a two-stage reduction over ``[N, splits]`` fp32 numbers).
* backward: one more pass writes ``dlogits = (g_lp * (onehot - p) - g_H * p * (log p + H)) / T``
  in the logits' dtype.

Extra memory is ``O(N * splits)`` fp32 numbers plus the gradient itself.

The same kernels run on CUDA (compiled) and on CPU through Triton's interpreter (tests). Triton
decides at import time whether its own ``@jit`` helpers (``tl.sum``, ...) are interpreted, so
CPU tensors need ``TRITON_INTERPRET=1`` set before torch/triton are imported (tests/conftest.py
does so on machines without a GPU). The interpreter's bf16 arithmetic is wrong, so every load
is upcast to fp32 at once, and every load is masked (an out-of-bounds load there returns
garbage).

Block sizes, warps and split factors are data (:class:`KernelConfig`), overridable through
``FORGE_LOGPROB_*`` environment variables so a sweep can tune them without code changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton
import triton.language as tl


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters of the two passes.

    ``*_block``: vocabulary elements one program loads per iteration (a power of two);
    ``*_warps``: warps per program and ``*_stages``: software-pipelining depth of the vocabulary
    loop (both ignored by the interpreter); ``fwd_lane_sums``: 1 keeps the forward's sums per
    lane, ``*_prefetch``: 1 loads the next block before computing the current one (see
    ``_stats_kernel``); ``min_programs``: the row
    count below which each row's vocabulary is split so that about this many programs run
    (a few waves over the GPU's multiprocessors); ``splits``: force a split factor (0 = auto).
    """

    fwd_block: int = 4096
    fwd_warps: int = 8
    fwd_stages: int = 3
    fwd_lane_sums: int = 0
    fwd_prefetch: int = 0
    bwd_block: int = 4096
    bwd_warps: int = 8
    bwd_stages: int = 3
    bwd_prefetch: int = 0
    min_programs: int = 528  # 4 waves over an H100's 132 SMs
    splits: int = 0


GPU_CONFIG = KernelConfig()
# the interpreter costs ~0.5 ms per program instance: few programs, wide blocks
CPU_CONFIG = KernelConfig(fwd_block=1024, fwd_warps=1, bwd_block=1024, bwd_warps=1, min_programs=1)

_ENV_FIELDS = {
    "FORGE_LOGPROB_FWD_BLOCK": "fwd_block",
    "FORGE_LOGPROB_FWD_WARPS": "fwd_warps",
    "FORGE_LOGPROB_FWD_STAGES": "fwd_stages",
    "FORGE_LOGPROB_FWD_LANE_SUMS": "fwd_lane_sums",
    "FORGE_LOGPROB_FWD_PREFETCH": "fwd_prefetch",
    "FORGE_LOGPROB_BWD_PREFETCH": "bwd_prefetch",
    "FORGE_LOGPROB_BWD_STAGES": "bwd_stages",
    "FORGE_LOGPROB_BWD_BLOCK": "bwd_block",
    "FORGE_LOGPROB_BWD_WARPS": "bwd_warps",
    "FORGE_LOGPROB_MIN_PROGRAMS": "min_programs",
    "FORGE_LOGPROB_SPLITS": "splits",
}


def default_config(device: torch.device) -> KernelConfig:
    """The config table's entry for ``device``, with ``FORGE_LOGPROB_*`` env overrides applied."""
    config = GPU_CONFIG if device.type == "cuda" else CPU_CONFIG
    overrides: dict[str, int] = {}
    for env, field in _ENV_FIELDS.items():
        raw = os.environ.get(env)
        if raw:
            try:
                overrides[field] = int(raw)
            except ValueError as exc:
                raise ValueError(f"{env} must be an integer, got {raw!r}") from exc
    config = replace(config, **overrides)
    validate_config(config)
    return config


def validate_config(config: KernelConfig) -> None:
    """Raise ``ValueError`` naming the bad field when a config cannot launch."""
    for field in ("fwd_block", "bwd_block"):
        value = getattr(config, field)
        if value < 16 or value & (value - 1):
            raise ValueError(f"{field} must be a power of two >= 16, got {value}")
    for field in ("fwd_warps", "bwd_warps"):
        value = getattr(config, field)
        if value not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"{field} must be one of 1, 2, 4, 8, 16, 32; got {value}")
    for field in ("fwd_stages", "bwd_stages"):
        if not 1 <= getattr(config, field) <= 8:
            raise ValueError(f"{field} must be in [1, 8], got {getattr(config, field)}")
    for field in ("fwd_lane_sums", "fwd_prefetch", "bwd_prefetch"):
        if getattr(config, field) not in (0, 1):
            raise ValueError(f"{field} must be 0 or 1, got {getattr(config, field)}")
    if config.min_programs < 1 or config.splits < 0:
        raise ValueError(f"min_programs must be >= 1 and splits >= 0; got {config}")


def _split(num_rows: int, vocab: int, block: int, config: KernelConfig) -> tuple[int, int]:
    """``(splits, chunk)``: each row's vocabulary in ``splits`` non-empty chunks of ``chunk``."""
    max_splits = triton.cdiv(vocab, block)
    splits = config.splits or triton.cdiv(config.min_programs, max(num_rows, 1))
    splits = max(1, min(splits, max_splits))
    chunk = triton.cdiv(triton.cdiv(vocab, splits), block) * block
    return triton.cdiv(vocab, chunk), chunk


# ---------------------------------------------------------------- kernels


def _stats_kernel(
    X, inner, stride_outer, stride_inner, M, L, A, vocab, chunk, num_splits, inv_temp,
    BLOCK: tl.constexpr, LANE_SUMS: tl.constexpr, PREFETCH: tl.constexpr,
):
    """Partial ``(max, sum exp, sum exp * (z - max))`` of one row's chunk of the vocabulary.

    The running max is one scalar (one block reduction per loaded block). ``LANE_SUMS``: keep
    the two sums per lane (rescaled by the scalar ``alpha``) and reduce them once at the end --
    two fewer block reductions (barriers) per block, but ``2 * BLOCK`` more fp32 registers per
    program, so fewer programs fit on a multiprocessor. ``PREFETCH``: issue the next block's
    load before reducing the current one (twice the bytes in flight per program). Which wins is
    the sweep's call.
    """
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    v_begin = split * chunk
    v_end = tl.minimum(v_begin + chunk, vocab)
    base = X + (row // inner) * stride_outer + (row % inner) * stride_inner
    offs = tl.arange(0, BLOCK)
    # a finite sentinel for the max: the first block (never empty) replaces it with alpha = 0
    m = tl.full((), -1e30, tl.float32)
    if LANE_SUMS:
        l = tl.zeros((BLOCK,), tl.float32)
        a = tl.zeros((BLOCK,), tl.float32)
    else:
        l = tl.zeros((), tl.float32)
        a = tl.zeros((), tl.float32)
    if PREFETCH:
        x_next = tl.load(base + v_begin + offs, mask=v_begin + offs < v_end, other=0.0)
    for start in range(v_begin, v_end, BLOCK):
        cols = start + offs
        mask = cols < v_end
        if PREFETCH:
            x = x_next
            x_next = tl.load(base + cols + BLOCK, mask=cols + BLOCK < v_end, other=0.0)
        else:
            x = tl.load(base + cols, mask=mask, other=0.0)
        z = x.to(tl.float32) * inv_temp
        m_new = tl.maximum(m, tl.max(tl.where(mask, z, float("-inf")), 0))
        alpha = tl.exp(m - m_new)
        d = tl.where(mask, z - m_new, 0.0)  # masked lanes: 0, so e * d is never 0 * -inf
        e = tl.where(mask, tl.exp(d), 0.0)
        if LANE_SUMS:
            a = alpha * (a + l * (m - m_new)) + e * d
            l = l * alpha + e
        else:
            a = alpha * (a + l * (m - m_new)) + tl.sum(e * d, 0)
            l = l * alpha + tl.sum(e, 0)
        m = m_new
    out = row * num_splits + split
    tl.store(M + out, m)
    if LANE_SUMS:
        tl.store(L + out, tl.sum(l, 0))
        tl.store(A + out, tl.sum(a, 0))
    else:
        tl.store(L + out, l)
        tl.store(A + out, a)


def _grad_kernel(
    X, inner, stride_outer, stride_inner, G, stride_g, TARGETS, LSE, ENT, GLP, GH, vocab, chunk, inv_temp,
    BLOCK: tl.constexpr, PREFETCH: tl.constexpr,
):
    """``dlogits = (g_lp * (onehot - p) - g_H * p * (log p + H)) / T`` over one row's chunk."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    v_begin = split * chunk
    v_end = tl.minimum(v_begin + chunk, vocab)
    lse = tl.load(LSE + row)
    ent = tl.load(ENT + row)
    g_lp = tl.load(GLP + row)
    g_h = tl.load(GH + row)
    target = tl.load(TARGETS + row)
    x_base = X + (row // inner) * stride_outer + (row % inner) * stride_inner
    g_base = G + row * stride_g
    offs = tl.arange(0, BLOCK)
    if PREFETCH:
        x_next = tl.load(x_base + v_begin + offs, mask=v_begin + offs < v_end, other=0.0)
    for start in range(v_begin, v_end, BLOCK):
        cols = start + offs
        mask = cols < v_end
        if PREFETCH:
            x = x_next
            x_next = tl.load(x_base + cols + BLOCK, mask=cols + BLOCK < v_end, other=0.0)
        else:
            x = tl.load(x_base + cols, mask=mask, other=0.0)
        z = x.to(tl.float32) * inv_temp
        log_p = z - lse
        p = tl.exp(log_p)
        dz = -p * (g_lp + g_h * (log_p + ent))
        dz = tl.where(cols == target, dz + g_lp, dz)
        tl.store(g_base + cols, (dz * inv_temp).to(G.dtype.element_ty), mask=mask)


_KERNELS = {"stats": triton.jit(_stats_kernel), "grad": triton.jit(_grad_kernel)}


def interpreter_on() -> bool:
    """Whether Triton runs kernels through its CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _kernel(name: str, device: torch.device) -> Any:
    if device.type != "cuda" and not interpreter_on():
        raise RuntimeError(
            f"the fused logprob kernels need a CUDA tensor, or TRITON_INTERPRET=1 (set before torch "
            f"is imported) for {device.type} tensors"
        )
    return _KERNELS[name]


# ---------------------------------------------------------------- launches


def row_layout(logits: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """``(x, inner, stride_outer, stride_inner)``: row ``r`` of ``logits`` flattened to ``[N, V]``
    starts at element ``(r // inner) * stride_outer + (r % inner) * stride_inner`` of ``x``.

    ``x`` is ``logits`` itself (a 2-D view of it where one exists) whenever the vocabulary has
    unit stride and the rows need at most two strides -- e.g. ``logits[:, :-1]`` of a
    ``[B, T, V]`` tensor, which ``reshape(-1, V)`` would copy whole; otherwise a contiguous copy.
    """
    vocab = logits.shape[-1]
    if logits.stride(-1) != 1 and vocab > 1:
        logits = logits.contiguous()
    if logits.dim() >= 2:
        try:
            flat = logits.view(-1, vocab)
            return flat, max(flat.shape[0], 1), 0, flat.stride(0)
        except RuntimeError:
            pass
    if logits.dim() == 3:
        return logits, max(logits.shape[1], 1), logits.stride(0), logits.stride(1)
    flat = logits.contiguous().view(-1, vocab)
    return flat, max(flat.shape[0], 1), 0, flat.stride(0)


def row_stats(
    logits: torch.Tensor, temperature: float, config: KernelConfig | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row ``(max, sum exp(z - max), sum exp(z - max) (z - max))`` of ``z = logits / T``, fp32.

    ``logits`` is ``[..., V]`` (rows laid out by :func:`row_layout`); outputs are ``[N]``.
    """
    config = config or default_config(logits.device)
    x, inner, stride_outer, stride_inner = row_layout(logits)
    vocab = logits.shape[-1]
    num_rows = logits.numel() // max(vocab, 1)
    splits, chunk = _split(num_rows, vocab, config.fwd_block, config)
    parts = torch.empty(3, num_rows, splits, dtype=torch.float32, device=logits.device)
    if num_rows:
        _kernel("stats", logits.device)[(num_rows, splits)](
            x, inner, stride_outer, stride_inner, parts[0], parts[1], parts[2], vocab, chunk, splits,
            1.0 / temperature, BLOCK=config.fwd_block, LANE_SUMS=bool(config.fwd_lane_sums),
            PREFETCH=bool(config.fwd_prefetch), num_warps=config.fwd_warps, num_stages=config.fwd_stages,
        )
    return merge_stats(parts[0], parts[1], parts[2])


def merge_stats(
    m: torch.Tensor, l: torch.Tensor, a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge partial stats ``[N, S]`` (each relative to its own max) along ``S`` -> ``[N]``."""
    m_all = m.amax(-1, keepdim=True)
    w = torch.exp(m - m_all)
    l_all = (l * w).sum(-1)
    a_all = (w * (a + l * (m - m_all))).sum(-1)
    return m_all.squeeze(-1), l_all, a_all


def logprob_lse_and_entropy(
    target_z: torch.Tensor, m: torch.Tensor, l: torch.Tensor, a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z[target] - logsumexp(z), logsumexp(z), -sum p log p)`` from merged stats.

    The logprob is ``(z[target] - max) - log l``: for a peaked row (target = max, large ``z``)
    that is exact where ``z[target] - (max + log l)`` would lose ``ulp(max) / 2``.
    """
    log_l = torch.log(l)
    return (target_z - m) - log_l, m + log_l, log_l - a / l


def write_grad(
    logits: torch.Tensor,
    grad_out: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    entropy: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor,
    temperature: float,
    config: KernelConfig | None = None,
) -> torch.Tensor:
    """Write ``d(sum g_lp logp + g_H H) / dlogits`` into ``grad_out`` (any float dtype).

    ``logits`` is ``[..., V]`` (rows laid out by :func:`row_layout`), ``grad_out`` a contiguous
    tensor of the same shape; ``grad_logp`` must already be zero on ignored rows; all per-row
    inputs are fp32 ``[N]`` and ``targets`` int64 ``[N]`` (-1: no one-hot term for the row).
    """
    if not grad_out.is_contiguous() or grad_out.shape != logits.shape:
        raise ValueError(f"grad_out must be contiguous with shape {tuple(logits.shape)}, got "
                         f"{tuple(grad_out.shape)} with strides {grad_out.stride()}")
    config = config or default_config(logits.device)
    x, inner, stride_outer, stride_inner = row_layout(logits)
    vocab = logits.shape[-1]
    num_rows = logits.numel() // max(vocab, 1)
    splits, chunk = _split(num_rows, vocab, config.bwd_block, config)
    if num_rows:
        _kernel("grad", logits.device)[(num_rows, splits)](
            x, inner, stride_outer, stride_inner, grad_out, vocab, targets, lse, entropy,
            grad_logp, grad_entropy, vocab, chunk, 1.0 / temperature,
            BLOCK=config.bwd_block, PREFETCH=bool(config.bwd_prefetch), num_warps=config.bwd_warps,
            num_stages=config.bwd_stages,
        )
    return grad_out


class FusedTargetLogprobsAndEntropy(torch.autograd.Function):
    """``(logits [..., V], targets [N], valid [N]) -> (logp [N], entropy [N])`` in fp32.

    ``N`` is the number of rows of ``logits`` (all dims but the last); strided views such as
    ``logits[:, :-1]`` are read in place (:func:`row_layout`), never copied.

    Same contract as :class:`losses.logprob_function.TargetLogprobsAndEntropy`: ``targets``
    already in ``[0, V)``; rows where ``valid`` is False get ``logp = 0`` and no gradient
    through it. Accumulates in fp32 from bf16/fp16/fp32 logits.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        logits: torch.Tensor,
        targets: torch.Tensor,
        valid: torch.Tensor,
        temperature: float,
        config: KernelConfig | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        config = config or default_config(logits.device)
        target_z = logits.gather(-1, targets.reshape(logits.shape[:-1]).unsqueeze(-1)).reshape(-1)
        target_z = target_z.float() * (1.0 / temperature)
        logp, lse, entropy = logprob_lse_and_entropy(target_z, *row_stats(logits, temperature, config))
        logp = torch.where(valid, logp, torch.zeros_like(logp))
        ctx.save_for_backward(logits, targets, valid, lse, entropy)
        ctx.temperature = temperature
        ctx.config = config
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None, None, None]:
        logits, targets, valid, lse, entropy = ctx.saved_tensors
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None
        zeros = torch.zeros_like(lse)
        g_lp = zeros if grad_logp is None else torch.where(valid, grad_logp.float(), zeros)
        g_h = zeros if grad_entropy is None else grad_entropy.float().contiguous()
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        write_grad(logits, grad, targets.contiguous(), lse, entropy, g_lp.contiguous(), g_h,
                   ctx.temperature, ctx.config)
        return grad, None, None, None, None


def fused_target_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    valid: torch.Tensor,
    temperature: float,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply :class:`FusedTargetLogprobsAndEntropy` to ``[..., V]`` logits: fp32 ``[N]`` outputs."""
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"fused logprobs need fp32/bf16/fp16 logits, got {logits.dtype}")
    if config is not None:
        validate_config(config)
    return FusedTargetLogprobsAndEntropy.apply(logits, targets, valid, float(temperature), config)


__all__ = [
    "CPU_CONFIG",
    "FusedTargetLogprobsAndEntropy",
    "GPU_CONFIG",
    "KernelConfig",
    "default_config",
    "fused_target_logprobs",
    "interpreter_on",
    "logprob_lse_and_entropy",
    "row_layout",
    "merge_stats",
    "row_stats",
    "write_grad",
]
