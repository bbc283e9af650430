"""Shared inputs for loss tests: a batch whose logprobs and ratios are known by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

LN2 = math.log(2.0)


@dataclass
class HandBatch:
    """B=2, T=2, V=2 with zero logits, so every target logprob is -ln 2 and every entropy ln 2.

    Generator logprobs are chosen so the trainer/generator ratios are
    seq 0: [1.5, 0.5] with A = +1; seq 1: [1.0, 2.0] with A = -1 and its 2nd token masked out.
    """

    logits: torch.Tensor
    target_ids: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    generator_logprobs: torch.Tensor

    def args(self) -> tuple[torch.Tensor, ...]:
        return self.logits, self.target_ids, self.loss_mask, self.advantages, self.generator_logprobs


def make_hand_batch(dtype: torch.dtype = torch.float64) -> HandBatch:
    ratios = torch.tensor([[1.5, 0.5], [1.0, 2.0]], dtype=dtype)
    return HandBatch(
        logits=torch.zeros(2, 2, 2, dtype=dtype, requires_grad=True),
        target_ids=torch.tensor([[0, 1], [1, 0]]),
        loss_mask=torch.tensor([[1, 1], [1, 0]]),
        advantages=torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=dtype),
        generator_logprobs=-LN2 - torch.log(ratios),
    )


@pytest.fixture
def hand_batch() -> HandBatch:
    return make_hand_batch()


def _logit_grad_from_logp_grad(batch: HandBatch, dlogp: torch.Tensor) -> torch.Tensor:
    """Chain rule for zero logits over V=2: d logp[y] / d logits = onehot(y) - 1/2."""
    onehot = torch.nn.functional.one_hot(batch.target_ids, 2).to(dlogp.dtype)
    return dlogp.unsqueeze(-1) * (onehot - 0.5)


@pytest.fixture
def logit_grad():
    """``logit_grad(batch, dloss/dlogp)`` -> expected dloss/dlogits for a :class:`HandBatch`."""
    return _logit_grad_from_logp_grad
