"""The loss interface every variant shares, and the bookkeeping around its policy objective.

A loss class is a pydantic model (its fields are its YAML keys) that subclasses
:class:`PolicyLoss` and implements one method, :meth:`PolicyLoss.policy_objective`, which turns
logprobs into a per-token loss. ``__call__`` does the rest the same way for every variant:
logprobs and entropy from logits, off-policy guards, aggregation, the optional KL penalty
and entropy bonus, and the common diagnostics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Annotated, ClassVar

import torch
from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.metrics import Reduce, record_metric
from losses.advantages import Estimator
from losses.guards import MRSGuard, TISGuard, apply_token_guards
from losses.ops import (
    Aggregation,
    KLEstimator,
    Metrics,
    aggregate,
    kl_estimate,
    masked_max,
    masked_mean,
    masked_min,
    masked_std,
    token_logprobs,
)

__all__ = ["LossOutput", "PolicyLoss"]


@dataclass
class LossOutput:
    """The scalar to backpropagate and detached 0-dim diagnostics keyed ``area/name``."""

    loss: torch.Tensor
    metrics: Metrics

    def scalars(self) -> dict[str, float]:
        """Metrics as Python floats (one host sync)."""
        return {k: float(v) for k, v in self.metrics.items()}

    def record(self, reduce: Reduce = Reduce.MEAN) -> None:
        """Send every metric to this process's metric collector."""
        for key, value in self.scalars().items():
            record_metric(key, value, reduce)


TokenGuardField = Annotated[TISGuard | MRSGuard, Field(discriminator="name")]


class PolicyLoss(StrictModel, ABC):
    """Base of every loss: shared fields, ``__call__`` and diagnostics.

    Subclasses set ``advantage_estimator`` (what :mod:`losses.advantages` estimator their
    advantages must come from) and implement :meth:`policy_objective`.
    """

    advantage_estimator: ClassVar[Estimator]
    loss_name: ClassVar[str] = ""  # set by @register_loss

    beta: float = Field(0.0, ge=0, description="weight of the KL penalty to the reference model")
    kl_estimator: KLEstimator = "k3"
    entropy_coef: float = Field(0.0, ge=0, description="weight of the entropy bonus")
    temperature: float = Field(1.0, gt=0, description="sampling temperature the generator used")
    ignore_index: int = -100
    aggregation: Aggregation = "token-mean"
    aggregation_scale: float = Field(1.0, gt=0, description="multiplier for seq-mean-token-sum")
    horizon: int | None = Field(None, gt=0, description="constant length for fixed-horizon (default T)")
    log_ratio_clamp: float | None = Field(20.0, gt=0, description="bound on |log ratio| before exp")
    guards: list[TokenGuardField] = Field(default_factory=list, description="off-policy guards (tis, mrs)")

    @abstractmethod
    def policy_objective(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, Metrics]:
        """Per-token loss ``[B, T]`` (to minimise) and its metrics (ratio, clip fractions)."""

    def reduce(self, per_token: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
        """This loss's aggregation of a per-token quantity to a scalar."""
        return aggregate(per_token, mask, self.aggregation, self.aggregation_scale, self.horizon)

    def __call__(
        self,
        logits: torch.Tensor,
        target_ids: torch.Tensor,
        loss_mask: torch.Tensor,
        advantages: torch.Tensor,
        generator_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None = None,
    ) -> LossOutput:
        """Loss of a batch: logits ``[B, T, V]``; targets, mask, advantages, logprobs ``[B, T]``."""
        self._check_shapes(logits, target_ids, loss_mask, advantages, generator_logprobs, ref_logprobs)
        (logp, entropy), metrics = token_logprobs(logits, target_ids, self.temperature, self.ignore_index)
        return self.from_logprobs(logp, entropy, metrics, target_ids, loss_mask, advantages, generator_logprobs,
                                  ref_logprobs)

    def from_logprobs(
        self,
        logp: torch.Tensor,
        entropy: torch.Tensor,
        metrics: Metrics,
        target_ids: torch.Tensor,
        loss_mask: torch.Tensor,
        advantages: torch.Tensor,
        generator_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None = None,
    ) -> LossOutput:
        """The loss from the policy's token logprobs and entropies ``[B, T]`` (with ``metrics``
        from :func:`losses.ops.token_logprobs`): what :meth:`__call__` does after scoring the
        logits, for callers that score without materialising them
        (:func:`losses.ops.token_logprobs_from_hidden`)."""
        if self.beta > 0 and ref_logprobs is None:
            raise ValueError(f"{type(self).__name__} has beta={self.beta} but got no ref_logprobs")
        mask = loss_mask.bool() & (target_ids != self.ignore_index)
        metrics = dict(metrics)
        generator_logprobs = generator_logprobs.to(logp.dtype)
        advantages = advantages.to(logp.dtype)

        guarded = apply_token_guards(self.guards, logp.detach(), generator_logprobs, mask)
        metrics.update(guarded.metrics)
        mask = mask & guarded.keep
        decoupled = any(g.decouples_ratio for g in self.guards)
        old_logprobs = logp.detach() if decoupled else generator_logprobs

        per_token, objective_metrics = self.policy_objective(logp, old_logprobs, advantages, mask)
        metrics.update(objective_metrics)
        policy_loss, count_metrics = self.reduce(per_token * guarded.weight, mask)
        metrics.update(count_metrics)
        total = policy_loss

        if ref_logprobs is not None:
            kl, kl_metrics = kl_estimate(logp, ref_logprobs.to(logp.dtype), mask, self.kl_estimator)
            metrics.update(kl_metrics)
            if self.beta > 0:
                kl_loss, _ = self.reduce(kl, mask)
                total = total + self.beta * kl_loss
        if self.entropy_coef > 0:
            entropy_loss, _ = self.reduce(entropy, mask)
            total = total - self.entropy_coef * entropy_loss

        with torch.no_grad():
            metrics.update(self._diagnostics(logp.detach(), generator_logprobs, advantages, mask))
            metrics["loss/policy"] = policy_loss.detach()
            metrics["loss/total"] = total.detach()
        return LossOutput(total, metrics)

    @staticmethod
    def _diagnostics(
        logp: torch.Tensor, generator_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> Metrics:
        # KL(generator || trainer) by k3 on the generator's own samples: the mismatch signal
        log_rho = logp - generator_logprobs
        return {
            "loss/approx_kl": masked_mean(torch.exp(log_rho) - 1 - log_rho, mask),
            "loss/advantage_mean": masked_mean(advantages, mask),
            "loss/advantage_std": masked_std(advantages, mask),
            "loss/advantage_min": masked_min(advantages, mask),
            "loss/advantage_max": masked_max(advantages, mask),
        }

    @staticmethod
    def _check_shapes(
        logits: torch.Tensor,
        target_ids: torch.Tensor,
        loss_mask: torch.Tensor,
        advantages: torch.Tensor,
        generator_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
    ) -> None:
        expected = tuple(target_ids.shape)
        if tuple(logits.shape[:-1]) != expected:
            raise ValueError(f"logits {tuple(logits.shape)} must be [B, T, V] with [B, T] = {expected}")
        named = {"loss_mask": loss_mask, "advantages": advantages, "generator_logprobs": generator_logprobs}
        if ref_logprobs is not None:
            named["ref_logprobs"] = ref_logprobs
        for name, tensor in named.items():
            if tuple(tensor.shape) != expected:
                raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {expected} like target_ids")
