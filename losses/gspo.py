"""GSPO (Zheng et al. 2025): clip a sequence-level ratio, the geometric mean of the token ratios."""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from losses.advantages import Estimator
from losses.base import PolicyLoss
from losses.ops import Aggregation, Metrics, clipped_surrogate, importance_ratio
from losses.registry import register_loss


@register_loss("gspo")
class GSPOLoss(PolicyLoss):
    """PPO clip on ``s_i = exp(mean_t log r_t)``; the gradient reaches every token through the mean.

    Sequence ratios sit much closer to 1 than token ratios, hence the paper's tiny clip range.
    """

    advantage_estimator: ClassVar[Estimator] = "grpo"

    clip_low: float = Field(3e-4, ge=0, le=1, description="ratio lower bound is 1 - clip_low")
    clip_high: float = Field(4e-4, ge=0, description="ratio upper bound is 1 + clip_high")
    dual_clip: float | None = Field(None, gt=1, description="bound -A*c on negative-advantage tokens")
    aggregation: Aggregation = "seq-mean-token-mean"

    def policy_objective(
        self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Metrics]:
        (ratio, _), ratio_metrics = importance_ratio(logprobs, old_logprobs, mask, "sequence", self.log_ratio_clamp)
        loss, clip_metrics = clipped_surrogate(ratio, advantages, mask, self.clip_low, self.clip_high, self.dual_clip)
        return loss, {**ratio_metrics, **clip_metrics}
