"""What each later turn's prompt holds: every earlier turn (training), or STTS's best few (test time).

A :data:`ContextBuilder` turns the first prompt and the finished turns (:class:`Segment`: the
model's sampled ids, the boundary/feedback ids after them, their reward) into the next prompt.
Token ids are reused, never re-tokenised.

* :func:`full_context` chains every turn, so turn ``k``'s prompt is turn ``k-1``'s whole sequence
  plus the boundary — one training row holds the whole episode (what GRPO uses).
* :class:`STTSContext` — sequential test-time scaling with context management (Dr. Kernel): at
  test time an episode may run more turns than training used, and feeding every earlier attempt
  back would outgrow the context; it keeps the first prompt plus the ``window`` highest-reward
  earlier turns, in their original order (ties go to the more recent turn).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["ContextBuilder", "STTSContext", "Segment", "full_context", "select_turns"]


@dataclass
class Segment:
    """One finished turn as context material: its sampled ids, the boundary after it, its reward."""

    sampled_ids: list[int]
    boundary_ids: list[int]
    reward: float


ContextBuilder = Callable[[list[int], list[Segment]], list[int]]


def full_context(initial_ids: list[int], segments: list[Segment]) -> list[int]:
    """Every turn in order: the prefix-chained conversation training uses."""
    ids = list(initial_ids)
    for s in segments:
        ids += s.sampled_ids + s.boundary_ids
    return ids


def select_turns(rewards: Sequence[float], window: int) -> list[int]:
    """Indices of the ``window`` highest ``rewards`` (ties: later index wins), ascending."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    ranked = sorted(range(len(rewards)), key=lambda i: (rewards[i], i), reverse=True)
    return sorted(ranked[:window])


@dataclass(frozen=True)
class STTSContext:
    """A :data:`ContextBuilder`: the first prompt + the best ``window`` earlier turns."""

    window: int = 4

    def __call__(self, initial_ids: list[int], segments: list[Segment]) -> list[int]:
        ids = list(initial_ids)
        for i in select_turns([s.reward for s in segments], self.window):
            ids += segments[i].sampled_ids + segments[i].boundary_ids
        return ids
