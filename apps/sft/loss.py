"""Cross-entropy over the masked (assistant) tokens, shaped like a policy loss for the engine."""

from __future__ import annotations

from typing import Literal

import torch

from forge_kernels.config import StrictModel
from losses.base import LossOutput
from losses.ops import token_logprobs

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
        (logp, entropy), metrics = token_logprobs(logits, target_ids, self.temperature, self.ignore_index)
        out = self.from_logprobs(logp, entropy, metrics, target_ids, loss_mask)
        with torch.no_grad():
            mask = loss_mask.bool() & (target_ids != self.ignore_index)
            correct = ((logits.argmax(-1) == target_ids) & mask).sum() / mask.sum().clamp(min=1)
        out.metrics["train/token_accuracy"] = correct
        return out

    def from_logprobs(self, logp: torch.Tensor, entropy: torch.Tensor, metrics: dict, target_ids: torch.Tensor,
                      loss_mask: torch.Tensor, advantages: torch.Tensor | None = None,
                      generator_logprobs: torch.Tensor | None = None,
                      ref_logprobs: torch.Tensor | None = None) -> LossOutput:
        """The loss from target logprobs (see :meth:`losses.base.PolicyLoss.from_logprobs`)."""
        mask = loss_mask.bool() & (target_ids != self.ignore_index)
        loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
        return LossOutput(loss, {"loss/sft": loss.detach()})
