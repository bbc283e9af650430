"""Off-policy guards: keep training stable when generator and trainer disagree on token probabilities.

The generator (vLLM, bf16, another kernel stack) and the trainer never compute exactly the same
probabilities, and an asynchronous loop adds policy lag. Each guard looks at the
trainer/generator ratio ``rho = pi_trainer / pi_generator`` (or, for PRS, at evaluation results),
returns what to keep and how to weight it, and reports its rejection rate:

* :class:`TISGuard` - truncated importance sampling: weight each token by ``min(rho, cap)``.
  With TIS a loss takes its trust-region ratio against the trainer's own detached logprobs and
  leaves the mismatch correction to this weight (the decoupled form of Yao et al. 2025 with one
  update per batch). Rate reported: fraction of tokens whose weight was truncated.
* :class:`MRSGuard` - mismatch rejection sampling: drop a whole trajectory unless the geometric
  mean of its token ratios lies in ``[lower, upper]`` and no token ratio is below ``veto``.
* :class:`PRSGuard` - profiling rejection sampling (Dr. Kernel): keep a *correct* turn with
  probability ``clip((PR - tau) / s, 0, 1)`` where PR is the profiling ratio (share of device
  time spent in the candidate's own kernels); incorrect turns are always kept. It acts on
  samples before batching, so it is not a loss field.

Token guards (TIS, MRS) compose with :func:`apply_token_guards`: keep masks are and-ed, weights
multiplied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, PrivateAttr, model_validator

from forge_kernels.config import StrictModel
from losses.ops import Metrics, masked_mean, masked_min

__all__ = ["GuardResult", "MRSGuard", "PRSGuard", "TISGuard", "apply_token_guards"]


@dataclass
class GuardResult:
    """What a token guard decided: ``keep`` (bool ``[B, T]``) and ``weight`` (detached ``[B, T]``)."""

    keep: torch.Tensor
    weight: torch.Tensor
    metrics: Metrics


class TISGuard(StrictModel):
    """Truncated importance sampling: per-token weight ``min(pi_trainer / pi_generator, cap)``."""

    name: Literal["tis"] = "tis"
    cap: float = Field(2.0, gt=0, description="upper bound on the trainer/generator ratio")

    # the loss then takes its trust-region ratio against the trainer's own detached logprobs
    decouples_ratio: ClassVar[bool] = True

    def __call__(
        self, trainer_logprobs: torch.Tensor, generator_logprobs: torch.Tensor, mask: torch.Tensor
    ) -> GuardResult:
        with torch.no_grad():
            rho = torch.exp(trainer_logprobs.detach() - generator_logprobs)
            weight = rho.clamp(max=self.cap)
            rate = masked_mean((rho > self.cap).float(), mask)
        return GuardResult(torch.ones_like(mask, dtype=torch.bool), weight, {"guard/tis_rejection_rate": rate})


class MRSGuard(StrictModel):
    """Mismatch rejection sampling: keep a trajectory iff its geometric-mean ratio is in bounds."""

    name: Literal["mrs"] = "mrs"
    lower: float = Field(0.999, gt=0, description="smallest geometric mean of token ratios kept")
    upper: float = Field(1.001, gt=0, description="largest geometric mean of token ratios kept")
    veto: float = Field(1e-4, ge=0, description="any token ratio below this rejects the trajectory")

    decouples_ratio: ClassVar[bool] = False

    @model_validator(mode="after")
    def _bounds_ordered(self) -> MRSGuard:
        if not self.lower <= 1.0 <= self.upper:
            raise ValueError(f"MRS needs lower <= 1 <= upper, got lower={self.lower}, upper={self.upper}")
        return self

    def __call__(
        self, trainer_logprobs: torch.Tensor, generator_logprobs: torch.Tensor, mask: torch.Tensor
    ) -> GuardResult:
        with torch.no_grad():
            log_rho = trainer_logprobs.detach() - generator_logprobs
            geo_mean = torch.exp(masked_mean(log_rho, mask, dim=-1))
            min_rho = torch.exp(
                torch.where(mask.bool(), log_rho, torch.full_like(log_rho, float("inf"))).amin(-1)
            )
            keep_seq = (geo_mean >= self.lower) & (geo_mean <= self.upper) & (min_rho >= self.veto)
            has_tokens = mask.bool().any(-1)
            rate = masked_mean((~keep_seq).float(), has_tokens)
            metrics = {
                "guard/mrs_rejection_rate": rate,
                "guard/mrs_min_token_ratio": torch.exp(masked_min(log_rho, mask)),
            }
        keep = keep_seq.unsqueeze(-1).expand_as(mask)
        return GuardResult(keep, torch.ones_like(log_rho), metrics)


TokenGuard = TISGuard | MRSGuard


def apply_token_guards(
    guards: Sequence[TokenGuard],
    trainer_logprobs: torch.Tensor,
    generator_logprobs: torch.Tensor,
    mask: torch.Tensor,
) -> GuardResult:
    """Run each guard on the same inputs; and the keep masks, multiply the weights, merge metrics."""
    keep = torch.ones_like(mask, dtype=torch.bool)
    weight = torch.ones_like(trainer_logprobs)
    metrics: Metrics = {}
    for guard in guards:
        result = guard(trainer_logprobs, generator_logprobs, mask)
        keep = keep & result.keep
        weight = weight * result.weight
        metrics.update(result.metrics)
    return GuardResult(keep, weight.detach(), metrics)


class PRSGuard(StrictModel):
    """Profiling rejection sampling: thin out correct turns whose kernels do little of the work.

    A correct turn survives with probability ``clip((PR - tau) / scale, 0, 1)``; the draw uses
    this guard's own seeded generator, so a run is reproducible.
    """

    name: Literal["prs"] = "prs"
    tau: float = Field(0.3, ge=0, le=1, description="profiling ratio at which keeping starts")
    scale: float = Field(0.1, gt=0, description="width of the ramp from never to always kept")
    seed: int = 0

    _rng: torch.Generator = PrivateAttr()

    def model_post_init(self, __context: Any) -> None:
        self._rng = torch.Generator().manual_seed(self.seed)

    def rng_state(self) -> torch.Tensor:
        """The state of this guard's draws (for checkpoints)."""
        return self._rng.get_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        self._rng.set_state(state)

    def keep_probability(self, profiling_ratio: torch.Tensor) -> torch.Tensor:
        """``clip((PR - tau) / scale, 0, 1)``."""
        return ((profiling_ratio - self.tau) / self.scale).clamp(0.0, 1.0)

    def __call__(self, correct: torch.Tensor, profiling_ratio: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
        """Keep flags ``[N]`` for ``N`` turns given their correctness and profiling ratio."""
        correct = torch.as_tensor(correct, dtype=torch.bool)
        pr = torch.as_tensor(profiling_ratio, dtype=torch.float64)
        if correct.shape != pr.shape or correct.dim() != 1:
            raise ValueError(
                f"PRS needs 1-D correct and profiling_ratio of one shape, got "
                f"{tuple(correct.shape)} and {tuple(pr.shape)}"
            )
        if torch.isnan(pr[correct]).any() or ((pr < 0) | (pr > 1))[correct].any():
            raise ValueError(f"profiling ratios of correct turns must lie in [0, 1], got {pr.tolist()}")
        draws = torch.rand(pr.shape, generator=self._rng, dtype=torch.float64)
        keep = ~correct | (draws < self.keep_probability(torch.nan_to_num(pr)))
        rate = (~keep).double().mean() if keep.numel() else torch.zeros((), dtype=torch.float64)
        return keep, {"guard/prs_rejection_rate": rate}

    def keep_turns(
        self, turns: Sequence[Any], correct_key: str = "correct", ratio_key: str = "profiling_ratio"
    ) -> tuple[list[bool], Metrics]:
        """Keep flags for :class:`forge_kernels.types.Turn` s, reading ``turn.info[correct_key]``
        and ``turn.info[ratio_key]`` (a correct turn without a profiling ratio is an error)."""
        correct = [bool(t.info.get(correct_key, False)) for t in turns]
        ratios = []
        for t, ok in zip(turns, correct):
            value = t.info.get(ratio_key)
            if ok and value is None:
                raise ValueError(f"correct turn has no info[{ratio_key!r}]; PRS needs the profiling ratio, which the "
                                 f"evaluator measures only on GPUs (set buffer.prs only for GPU evaluation)")
            ratios.append(float("nan") if value is None else float(value))
        keep, metrics = self(torch.tensor(correct, dtype=torch.bool), torch.tensor(ratios, dtype=torch.float64))
        return keep.tolist(), metrics
