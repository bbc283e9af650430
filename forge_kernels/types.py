"""Data that flows between actors: completions, turns, episodes and training batches.

An :class:`Episode` is always a list of :class:`Turn`\\ s; a single-turn episode has one. Token ids
are the ids the generator sampled (never re-tokenised text), so the trainer scores exactly what
the generator produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Batch", "Completion", "Episode", "Turn"]


@dataclass
class Completion:
    """One sampled continuation of a prompt."""

    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    logprobs: list[float]  # generator logprob of each sampled token
    policy_version: int
    finish_reason: str = "stop"  # "stop" | "length"

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"Completion has {len(self.token_ids)} tokens but {len(self.logprobs)} logprobs"
            )


@dataclass
class Turn:
    """One model turn inside an episode: what it produced and what it earned."""

    completion: Completion
    reward: float = 0.0
    feedback: str = ""  # evaluator feedback shown to the model before the next turn
    info: dict[str, Any] = field(default_factory=dict)  # eval result summary, fault class, ...
    advantage: float = 0.0


@dataclass
class Episode:
    """All turns of one sample; ``group_id`` ties together samples of the same prompt."""

    episode_id: str
    group_id: str
    task_name: str
    turns: list[Turn] = field(default_factory=list)
    ref_logprobs: list[float] | None = None

    @property
    def policy_version(self) -> int:
        """Oldest policy version that produced any of the turns (what staleness is measured by)."""
        return min(t.completion.policy_version for t in self.turns)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]


@dataclass
class Batch:
    """Padded training tensors for one optimiser step (rows are sequences)."""

    input_ids: torch.Tensor  # [B, T] prompt + response tokens
    target_ids: torch.Tensor  # [B, T] next-token targets (input shifted left)
    loss_mask: torch.Tensor  # [B, T] 1 on the model's own sampled tokens
    advantages: torch.Tensor  # [B, T] per-token advantage
    generator_logprobs: torch.Tensor  # [B, T]
    ref_logprobs: torch.Tensor | None = None  # [B, T]
    policy_versions: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])
