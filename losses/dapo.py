"""DAPO (Yu et al. 2025): decoupled clip ("clip-higher"), token-mean aggregation, no KL.

DAPO's dynamic sampling (drop groups whose rewards are all equal) and overlong shaping act on
samples and rewards, not here: groups with zero advantage contribute nothing to this loss.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from losses.advantages import Estimator
from losses.base import PolicyLoss
from losses.ops import Aggregation, Metrics, clipped_surrogate, importance_ratio
from losses.registry import register_loss


@register_loss("dapo")
class DAPOLoss(PolicyLoss):
    """Token-ratio PPO clip with a wider upper bound so low-probability tokens can still rise."""

    advantage_estimator: ClassVar[Estimator] = "grpo"

    clip_low: float = Field(0.2, ge=0, le=1, description="ratio lower bound is 1 - clip_low")
    clip_high: float = Field(0.28, ge=0, description="ratio upper bound is 1 + clip_high")
    dual_clip: float | None = Field(None, gt=1, description="bound -A*c on negative-advantage tokens")
    aggregation: Aggregation = "token-mean"

    def policy_objective(
        self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Metrics]:
        (ratio, _), ratio_metrics = importance_ratio(logprobs, old_logprobs, mask, "token", self.log_ratio_clamp)
        loss, clip_metrics = clipped_surrogate(ratio, advantages, mask, self.clip_low, self.clip_high, self.dual_clip)
        return loss, {**ratio_metrics, **clip_metrics}
