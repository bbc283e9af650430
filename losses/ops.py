"""Shared loss primitives; every loss class is a few lines composing these.

Each op returns ``(tensor(s), metrics)``: ``metrics`` maps ``area/name`` keys to detached 0-dim
tensors computed under ``no_grad`` (tensors rather than floats so that ``torch.compile`` needs no
host sync; :meth:`losses.base.LossOutput.scalars` turns them into floats). The masked
reductions (:func:`masked_sum`, :func:`masked_mean`, :func:`masked_std`) are plain helpers.

Shapes: logits ``[B, T, V]``; everything per token ``[B, T]``; ``mask`` is 1 (or True) on the
tokens that count.
"""

from __future__ import annotations

from typing import Literal

import torch

from losses.fused_lm_head import DEFAULT_VOCAB_CHUNK, FusedLinearLogprobsAndEntropy
from losses.fused_logprob import fused_token_logprobs
from losses.logprob_function import DEFAULT_CHUNK_ELEMENTS, TargetLogprobsAndEntropy

Metrics = dict[str, torch.Tensor]
KLEstimator = Literal["k1", "k2", "k3", "k3_clamped"]
Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "fixed-horizon"]
RatioLevel = Literal["token", "sequence"]
LogprobImpl = Literal["auto", "fused", "chunked"]

__all__ = [
    "Aggregation",
    "KLEstimator",
    "LogprobImpl",
    "Metrics",
    "RatioLevel",
    "aggregate",
    "cispo_objective",
    "clipped_surrogate",
    "importance_ratio",
    "kl_estimate",
    "masked_max",
    "masked_mean",
    "masked_min",
    "masked_std",
    "masked_sum",
    "token_logprobs",
    "token_logprobs_from_hidden",
]


# ---------------------------------------------------------------- masked reductions


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is set (over all elements, or along ``dim``)."""
    masked = x * mask.to(x.dtype)
    return masked.sum() if dim is None else masked.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` where ``mask`` is set; 0 where nothing is set (never NaN)."""
    count = masked_sum(torch.ones_like(x), mask, dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_std(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Standard deviation of the masked elements (Bessel-corrected by default); 0 for < 2 elements."""
    count = masked_sum(torch.ones_like(x), mask)
    mean = masked_sum(x, mask) / count.clamp(min=1)
    sq = masked_sum((x - mean) ** 2, mask)
    denom = (count - 1) if unbiased else count
    return torch.where(count > 1, torch.sqrt(sq / denom.clamp(min=1)), torch.zeros_like(sq))


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Largest masked element (``-inf`` when nothing is masked)."""
    return torch.where(mask.bool(), x, torch.full_like(x, float("-inf"))).max()


def masked_min(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Smallest masked element (``inf`` when nothing is masked)."""
    return torch.where(mask.bool(), x, torch.full_like(x, float("inf"))).min()


# ---------------------------------------------------------------- logprobs and entropy


def token_logprobs(
    logits: torch.Tensor,
    target_ids: torch.Tensor,
    temperature: float = 1.0,
    ignore_index: int = -100,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    impl: LogprobImpl = "auto",
) -> tuple[tuple[torch.Tensor, torch.Tensor], Metrics]:
    """Logprob of each target token and the entropy of each position's distribution.

    Math runs in fp32 (fp64 for fp64 logits) and no fp32 copy of the logits is ever made.
    ``impl``: ``fused`` — the Triton kernels of :mod:`losses.fused_logprob` (one pass over the
    logits forward, one backward); ``chunked`` — torch ops one chunk of rows at a time
    (:mod:`losses.logprob_function`); ``auto`` — fused on CUDA for 16/32-bit logits, chunked
    elsewhere (on CPU the fused kernels run only under Triton's interpreter, which is slow).
    ``logits / temperature`` is the distribution scored, matching a generator that sampled at
    that temperature. Positions whose target is ``ignore_index`` get logprob 0 and no gradient.

    Returns ``((logprobs [B, T], entropy [B, T]), metrics)``; both outputs carry gradients.
    """
    if logits.dim() < 2 or logits.shape[:-1] != target_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be target_ids.shape + (vocab,); "
            f"target_ids is {tuple(target_ids.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    vocab = logits.shape[-1]
    valid = target_ids != ignore_index
    safe_targets = torch.where(valid, target_ids, torch.zeros_like(target_ids))
    if impl == "auto":
        impl = "fused" if logits.is_cuda and logits.dtype != torch.float64 else "chunked"
    if impl == "fused":
        if logits.dtype == torch.float64:
            raise ValueError("impl='fused' computes in fp32; fp64 logits need impl='chunked' (or 'auto')")
        logp, entropy = fused_token_logprobs(
            logits.reshape(-1, vocab), safe_targets.reshape(-1), valid.reshape(-1), float(temperature)
        )
    elif impl == "chunked":
        logp, entropy = TargetLogprobsAndEntropy.apply(
            logits.reshape(-1, vocab),
            safe_targets.reshape(-1),
            valid.reshape(-1),
            float(temperature),
            int(chunk_elements),
        )
    else:
        raise ValueError(f"impl must be 'auto', 'fused' or 'chunked', got {impl!r}")
    logp = logp.reshape(target_ids.shape)
    entropy = entropy.reshape(target_ids.shape)
    with torch.no_grad():
        metrics = {
            "loss/logprob_mean": masked_mean(logp.detach(), valid),
            "loss/entropy": masked_mean(entropy.detach(), valid),
        }
    return (logp, entropy), metrics


def token_logprobs_from_hidden(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    target_ids: torch.Tensor,
    temperature: float = 1.0,
    ignore_index: int = -100,
    vocab_chunk: int = DEFAULT_VOCAB_CHUNK,
) -> tuple[tuple[torch.Tensor, torch.Tensor], Metrics]:
    """:func:`token_logprobs` of ``hidden @ lm_head_weight.T`` without materialising those logits.

    ``hidden`` is ``target_ids.shape + (d,)`` (the last hidden states), ``lm_head_weight`` is
    ``[V, d]``; the vocabulary is processed ``vocab_chunk`` columns at a time
    (:mod:`losses.fused_lm_head`). Gradients flow to ``hidden`` and ``lm_head_weight``.
    """
    if hidden.shape[:-1] != target_ids.shape or lm_head_weight.dim() != 2 or \
            lm_head_weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} must be target_ids.shape + (d,) and lm_head_weight "
            f"{tuple(lm_head_weight.shape)} must be (vocab, d); target_ids is {tuple(target_ids.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    valid = target_ids != ignore_index
    safe_targets = torch.where(valid, target_ids, torch.zeros_like(target_ids))
    logp, entropy = FusedLinearLogprobsAndEntropy.apply(
        hidden.reshape(-1, hidden.shape[-1]), lm_head_weight, safe_targets.reshape(-1), valid.reshape(-1),
        float(temperature), int(vocab_chunk),
    )
    logp, entropy = logp.reshape(target_ids.shape), entropy.reshape(target_ids.shape)
    with torch.no_grad():
        metrics = {"loss/logprob_mean": masked_mean(logp.detach(), valid),
                   "loss/entropy": masked_mean(entropy.detach(), valid)}
    return (logp, entropy), metrics


# ---------------------------------------------------------------- importance ratios


def importance_ratio(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    mask: torch.Tensor,
    level: RatioLevel = "token",
    log_ratio_clamp: float | None = 20.0,
) -> tuple[tuple[torch.Tensor, torch.Tensor], Metrics]:
    """Importance ratio ``pi_theta / pi_old`` per token ``[B, T]``.

    ``level="token"``: ``exp(logp_t - old_t)``. ``level="sequence"`` (GSPO): every token of
    sequence ``i`` gets ``s_i = exp(mean_t (logp_t - old_t))``, with the gradient flowing
    through each token's logprob via the mean. ``log_ratio_clamp`` bounds the log ratio before
    ``exp`` (no gradient beyond the bound) so that a single wild token cannot overflow.

    Returns ``((ratio, log_ratio), metrics)`` where ``log_ratio`` is the (clamped) per-token
    or per-sequence log ratio broadcast to ``[B, T]``.
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"ratio level must be 'token' or 'sequence', got {level!r}")
    log_ratio = logprobs - old_logprobs
    if level == "sequence":
        log_ratio = masked_mean(log_ratio, mask, dim=-1).unsqueeze(-1).expand_as(logprobs)
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "loss/ratio_mean": masked_mean(r, mask),
            "loss/ratio_max": masked_max(r, mask),
            "loss/ratio_min": masked_min(r, mask),
        }
    return (ratio, log_ratio), metrics


# ---------------------------------------------------------------- KL estimators


def kl_estimate(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    estimator: KLEstimator = "k3",
    clamp: float = 10.0,
) -> tuple[torch.Tensor, Metrics]:
    """Per-token estimate of ``KL(pi_theta || pi_ref)`` from samples of ``pi_theta`` (Schulman).

    With ``r = logp_ref - logp``: ``k1 = -r``; ``k2 = r^2 / 2``; ``k3 = exp(r) - 1 - r``;
    ``k3_clamped`` is k3 with ``r`` clamped to ``[-20, 20]`` and the result to ``[-clamp, clamp]``
    (verl's "low_var_kl").
    """
    r = ref_logprobs - logprobs
    if estimator == "k1":
        kl = -r
    elif estimator == "k2":
        kl = 0.5 * r * r
    elif estimator == "k3":
        kl = torch.exp(r) - 1 - r
    elif estimator == "k3_clamped":
        r = r.clamp(-20.0, 20.0)
        kl = (torch.exp(r) - 1 - r).clamp(-clamp, clamp)
    else:
        raise ValueError(f"KL estimator must be one of k1, k2, k3, k3_clamped; got {estimator!r}")
    with torch.no_grad():
        metrics = {"loss/ref_kl": masked_mean(kl.detach(), mask)}
    return kl, metrics


# ---------------------------------------------------------------- policy objectives


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """PPO clipped surrogate as a per-token loss (to minimise): ``max(-A r, -A clip(r, 1-lo, 1+hi))``.

    ``dual_clip = c > 1`` additionally bounds the loss of negative-advantage tokens by ``-A c``
    (Ye et al. 2020), so a huge ratio on a bad token cannot dominate the step.

    Metrics count tokens whose gradient the clip removed: ``clip_frac_low`` (``A < 0`` and
    ``r < 1 - lo``), ``clip_frac_high`` (``A > 0`` and ``r > 1 + hi``), ``dual_clip_frac``.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    negative = advantages < 0
    if dual_clip is not None:
        loss = torch.where(negative, torch.minimum(loss, -advantages * dual_clip), loss)
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "loss/clip_frac_low": masked_mean((negative & (r < 1.0 - clip_low)).float(), mask),
            "loss/clip_frac_high": masked_mean(((advantages > 0) & (r > 1.0 + clip_high)).float(), mask),
        }
        if dual_clip is not None:
            metrics["loss/dual_clip_frac"] = masked_mean((negative & (r > dual_clip)).float(), mask)
    return loss, metrics


def cispo_objective(
    ratio: torch.Tensor,
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, Metrics]:
    """CISPO (MiniMax-M1) per-token loss: ``-sg(clip(r, 1-lo, 1+hi)) * A * logp``.

    Unlike PPO, no token loses its gradient: only its importance weight is capped.
    """
    weight = ratio.detach().clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = -weight * advantages * logprobs
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "loss/clip_frac_low": masked_mean((r < 1.0 - clip_low).float(), mask),
            "loss/clip_frac_high": masked_mean((r > 1.0 + clip_high).float(), mask),
        }
    return loss, metrics


# ---------------------------------------------------------------- aggregation


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation = "token-mean",
    scale: float = 1.0,
    horizon: int | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    * ``token-mean``: sum over all tokens / number of tokens (DAPO).
    * ``seq-mean-token-mean``: mean over sequences of each sequence's token mean (GRPO).
    * ``seq-mean-token-sum``: mean over sequences of each sequence's token sum, times ``scale``
      (Dr. Kernel sets ``scale`` to 1 / max response length).
    * ``fixed-horizon``: sum over all tokens / (B * horizon) (Dr. GRPO); ``horizon`` defaults
      to ``T``. Independent of response lengths, so no length bias.

    Sequence means run over sequences with at least one masked token.
    """
    m = mask.to(per_token.dtype)
    tokens_per_seq = m.sum(-1)
    num_seqs = (tokens_per_seq > 0).to(per_token.dtype).sum().clamp(min=1)
    if mode == "token-mean":
        out = (per_token * m).sum() / m.sum().clamp(min=1)
    elif mode == "seq-mean-token-mean":
        out = ((per_token * m).sum(-1) / tokens_per_seq.clamp(min=1)).sum() / num_seqs
    elif mode == "seq-mean-token-sum":
        out = (per_token * m).sum(-1).sum() / num_seqs * scale
    elif mode == "fixed-horizon":
        h = per_token.shape[-1] if horizon is None else horizon
        if h <= 0:
            raise ValueError(f"fixed-horizon aggregation needs horizon > 0, got {h}")
        rows = per_token.reshape(-1, per_token.shape[-1]).shape[0]
        out = (per_token * m).sum() / (rows * h)
    else:
        raise ValueError(
            "aggregation must be one of token-mean, seq-mean-token-mean, "
            f"seq-mean-token-sum, fixed-horizon; got {mode!r}"
        )
    with torch.no_grad():
        metrics = {"loss/num_tokens": m.sum().detach(), "loss/num_seqs": (tokens_per_seq > 0).sum().detach().float()}
    return out, metrics
