"""The advantages actor: the configured loss's estimator over each group of episodes."""

from __future__ import annotations

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.metrics import record_metric
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.types import Episode
from losses.advantages import Estimator, assign_advantages

__all__ = ["ComputeAdvantages"]


def _not_padding(ep: Episode) -> bool:
    return not ep.padding


class ComputeAdvantages(Actor):
    """Fills ``turn.advantage``; the app sets ``estimator`` from ``loss.advantage_estimator``."""

    class Config(StrictModel):
        estimator: Estimator = "grpo"
        gamma: float = Field(default=1.0, ge=0, le=1, description="discount over turns")
        eps: float = Field(default=1e-6, gt=0)
        per_turn: bool = Field(default=False, description="group by (prompt, turn) for every estimator "
                                                          "(GRPO per turn); trloo always does")

    @endpoint
    async def compute(self, episodes: list[Episode]) -> list[Episode]:
        """``episodes`` (any number of whole groups) with advantages filled in."""
        metrics = assign_advantages(episodes, self.config.estimator, self.config.gamma, self.config.eps,
                                    is_valid=_not_padding, per_turn=self.config.per_turn)
        for key, value in metrics.items():
            record_metric(key, value)
        return episodes
