"""Rollouts: one episode driver for single- and multi-turn episodes, its backends, context
management and metrics.

    episodes = await run_episodes(task, first_prompt_ids, n, backend, TurnsConfig(max_turns=1),
                                  group_id="g0")

``backend`` is an :class:`ActorTurnBackend` (the GRPO app's actors) or a
:class:`LocalTurnBackend` (in this process: the eval app, benches).
"""

from forge_kernels.rollout.backends import (
    ActorTurnBackend,
    Continuation,
    EnvTurnFeedback,
    LocalTurnBackend,
    TurnBackend,
)
from forge_kernels.rollout.context import ContextBuilder, Segment, STTSContext, full_context, select_turns
from forge_kernels.rollout.episodes import EpisodeState, TurnsConfig, run_episodes, turn_from_outcome
from forge_kernels.rollout.metrics import batch_metrics, turn_summary

__all__ = [
    "ActorTurnBackend",
    "ContextBuilder",
    "Continuation",
    "EnvTurnFeedback",
    "EpisodeState",
    "LocalTurnBackend",
    "STTSContext",
    "Segment",
    "TurnBackend",
    "TurnsConfig",
    "batch_metrics",
    "full_context",
    "run_episodes",
    "select_turns",
    "turn_from_outcome",
    "turn_summary",
]
