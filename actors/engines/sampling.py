"""Sampling settings shared by every generation engine."""

from __future__ import annotations

from pydantic import Field

from forge_kernels.config import StrictModel

__all__ = ["SamplingConfig"]


class SamplingConfig(StrictModel):
    """How completions are sampled. Logprobs are always of the temperature-scaled distribution
    *before* top-p/top-k truncation, which is what the trainer recomputes."""

    temperature: float = Field(default=1.0, ge=0.0, description="0 = greedy")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0, description="0 = off")
    max_tokens: int = Field(default=256, ge=1)
    seed: int | None = None
