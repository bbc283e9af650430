"""Cross-entropy over the masked (assistant) tokens, shaped like a policy loss for the engine."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from forge_kernels.config import StrictModel
from losses.base import LossOutput

__all__ = ["SFTLoss"]


class SFTLoss(StrictModel):
    """Token-mean negative log-likelihood of the targets under the loss mask.

    Takes (and ignores) the advantage and logprob arguments of :class:`losses.base.PolicyLoss`,
    so :class:`actors.engines.hf_training.HFTrainingEngine` trains with it unchanged.
    """

    aggregation: Literal["token-mean"] = "token-mean"
    temperature: float = 1.0
    ignore_index: int = -100

    def __call__(self, logits: torch.Tensor, target_ids: torch.Tensor, loss_mask: torch.Tensor,
                 advantages: torch.Tensor | None = None, generator_logprobs: torch.Tensor | None = None,
                 ref_logprobs: torch.Tensor | None = None) -> LossOutput:
        mask = loss_mask.bool() & (target_ids != self.ignore_index)
        targets = target_ids.clamp(min=0)
        nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view(mask.shape)
        count = mask.sum().clamp(min=1)
        loss = (nll * mask).sum() / count
        with torch.no_grad():
            correct = ((logits.argmax(-1) == targets) & mask).sum() / count
        return LossOutput(loss, {"loss/sft": loss.detach(), "train/token_accuracy": correct})
