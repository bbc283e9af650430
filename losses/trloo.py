"""TRLOO loss (Dr. Kernel / KernelGym): PPO clip with turn-level leave-one-out advantages.

The objective is the token-ratio clipped surrogate; what differs is the advantage
(:func:`losses.advantages.assign_advantages` with ``estimator="trloo"``), which removes GRPO's
self-inclusion bias and credits each turn of a multi-turn episode with its own return-to-go.
Dr. Kernel aggregates by sequence-mean of token sums, scaled (``aggregation_scale``, e.g.
1 / max response length).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from losses.advantages import Estimator
from losses.base import PolicyLoss
from losses.ops import Aggregation, Metrics, clipped_surrogate, importance_ratio
from losses.registry import register_loss


@register_loss("trloo")
class TRLOOLoss(PolicyLoss):
    """Token-ratio PPO clip; expects TRLOO advantages; seq-mean-token-sum aggregation."""

    advantage_estimator: ClassVar[Estimator] = "trloo"

    clip_low: float = Field(0.2, ge=0, le=1, description="ratio lower bound is 1 - clip_low")
    clip_high: float = Field(0.28, ge=0, description="ratio upper bound is 1 + clip_high")
    dual_clip: float | None = Field(None, gt=1, description="bound -A*c on negative-advantage tokens")
    aggregation: Aggregation = "seq-mean-token-sum"

    def policy_objective(
        self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Metrics]:
        (ratio, _), ratio_metrics = importance_ratio(logprobs, old_logprobs, mask, "token", self.log_ratio_clamp)
        loss, clip_metrics = clipped_surrogate(ratio, advantages, mask, self.clip_low, self.clip_high, self.dual_clip)
        return loss, {**ratio_metrics, **clip_metrics}
