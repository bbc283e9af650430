"""STTS: sequential test-time scaling with context management (Dr. Kernel).

At test time an episode may run more turns than training used; feeding every earlier attempt back
would outgrow the context. :class:`STTSContext` builds each turn's prompt from the first prompt plus
the ``window`` highest-reward earlier turns (each: the model's reply and the feedback on it), kept in
their original order. Ties go to the more recent turn. Token ids are reused, never re-tokenised:
a turn's sampled ids and the boundary/feedback ids after it travel together.

Use it as the ``context`` of :func:`forge_kernels.env.multiturn.run_episodes`;
:func:`forge_kernels.env.turn_metrics.turn_summary` reports last-turn and best-so-far results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forge_kernels.env.multiturn import Segment

__all__ = ["STTSContext", "select_turns"]


def select_turns(rewards: Sequence[float], window: int) -> list[int]:
    """Indices of the ``window`` highest ``rewards`` (ties: later index wins), ascending."""
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    ranked = sorted(range(len(rewards)), key=lambda i: (rewards[i], i), reverse=True)
    return sorted(ranked[:window])


@dataclass(frozen=True)
class STTSContext:
    """A :data:`~forge_kernels.env.multiturn.ContextBuilder`: first prompt + best ``window`` turns."""

    window: int = 4

    def __call__(self, initial_ids: list[int], segments: list[Segment]) -> list[int]:
        ids = list(initial_ids)
        for i in select_turns([s.reward for s in segments], self.window):
            ids += segments[i].sampled_ids + segments[i].boundary_ids
        return ids
