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
    """One model turn inside an episode: what it produced and what it earned.

    The framework's own facts are typed fields; ``info`` carries the environment's facts
    (for kernels: fault, speedup, device, ...) and ``metrics`` its scalars for logging.
    """

    completion: Completion
    reward: float = 0.0
    feedback: str = ""  # evaluator feedback shown to the model before the next turn
    info: dict[str, Any] = field(default_factory=dict)  # the environment's facts (Outcome.info)
    advantage: float = 0.0
    index: int = 1  # 1-based turn number within the episode
    success: bool = False  # the environment's notion of solved (Outcome.success)
    reward_valid: bool = True  # False: the scorer failed, the reward carries no signal
    raw_reward: float | None = None  # the reward before the buffer normalised it (None: not normalised)
    padding: bool = False  # a copy the buffer added to fill a group: no advantage, no loss
    metrics: dict[str, float] = field(default_factory=dict)  # the environment's scalars (Outcome.metrics)

    @property
    def unnormalized_reward(self) -> float:
        """The reward as the environment gave it."""
        return self.reward if self.raw_reward is None else self.raw_reward


@dataclass
class Episode:
    """All turns of one sample; ``group_id`` ties together samples of the same prompt."""

    episode_id: str
    group_id: str
    task_name: str
    turns: list[Turn] = field(default_factory=list)
    ref_logprobs: list[float] | None = None
    stop_reason: str | None = None  # done | max_turns | context_limit | scorer_failed

    @property
    def padding(self) -> bool:
        """A copy the buffer added to fill its group (left out of advantages and metrics)."""
        return any(t.padding for t in self.turns)

    def is_prefix_chained(self) -> bool:
        """Whether each turn's prompt starts with the previous turn's prompt and sampled ids (so
        the whole episode is one sequence: one forward scores every turn)."""
        for prev, turn in zip(self.turns, self.turns[1:]):
            seq = prev.completion.prompt_ids + prev.completion.token_ids
            if turn.completion.prompt_ids[: len(seq)] != seq:
                return False
        return True

    def as_one_completion(self) -> Completion:
        """A prefix-chained episode as one completion: the first prompt, then everything after it
        (sampled tokens, feedback and boundaries of every turn); raises if it is not chained."""
        if not self.is_prefix_chained():
            raise ValueError(f"episode {self.episode_id}: turns are not prefix-chained; cannot score it as one sequence")
        first, last = self.turns[0].completion, self.turns[-1].completion
        rest = (last.prompt_ids + last.token_ids)[len(first.prompt_ids):]
        return Completion(first.prompt_ids, rest, "", [0.0] * len(rest), last.policy_version)

    def sampled_positions(self) -> list[int]:
        """For :meth:`as_one_completion`'s tokens: the index of each token the model sampled, turns
        in order (what the trainer's ``ref_logprobs`` line up with)."""
        base = len(self.turns[0].completion.prompt_ids)
        return [len(t.completion.prompt_ids) - base + j for t in self.turns for j in range(len(t.completion.token_ids))]

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
