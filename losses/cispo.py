"""CISPO (MiniMax-M1, 2025): clip the importance-sampling weight, never the token's gradient."""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from losses.advantages import Estimator
from losses.base import PolicyLoss
from losses.ops import Aggregation, Metrics, cispo_objective, importance_ratio
from losses.registry import register_loss


@register_loss("cispo")
class CISPOLoss(PolicyLoss):
    """``-sg(clip(r_t, 1 - clip_low, 1 + clip_high)) * A * log pi(y_t)`` per token, token-mean.

    Defaults: no lower bound (``clip_low = 1`` puts it at 0) and a wide upper bound, so rare
    tokens that PPO would clip away keep contributing, with a capped weight.
    """

    advantage_estimator: ClassVar[Estimator] = "grpo"

    clip_low: float = Field(1.0, ge=0, le=1, description="weight lower bound is 1 - clip_low")
    clip_high: float = Field(4.0, ge=0, description="weight upper bound is 1 + clip_high")
    aggregation: Aggregation = "token-mean"

    def policy_objective(
        self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Metrics]:
        (ratio, _), ratio_metrics = importance_ratio(logprobs, old_logprobs, mask, "token", self.log_ratio_clamp)
        loss, clip_metrics = cispo_objective(ratio, logprobs, advantages, mask, self.clip_low, self.clip_high)
        return loss, {**ratio_metrics, **clip_metrics}
