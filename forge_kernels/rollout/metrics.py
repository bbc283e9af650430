"""Metrics of a batch of episodes, from the environment's per-turn scalars (``Turn.metrics``).

The framework does not know what the scalars mean (for kernels: extracted, compiled, correct,
fast_1, fast_1.5); it averages them. A key some turns lack counts 0 for them (a kernel that was
never timed is not fast). Padding copies are left out.

* :func:`batch_metrics` — ``reward/total`` (the episode's summed environment reward) and
  ``reward/<key>`` (the last turn's scalars), per episode;
* :func:`turn_summary` — for multi-turn episodes: ``turn/<k>/{episodes,reward,<key>}`` over the
  episodes that ran turn ``k``; ``best_by_turn/<k>/<key>`` over *all* episodes, the best value at
  some turn ``<= k`` (an episode that stopped early keeps its best): the best-so-far curve;
  ``best/...`` and ``last/...`` over all turns; ``episode/turns``.
"""

from __future__ import annotations

from collections.abc import Sequence

from forge_kernels.types import Episode, Turn

__all__ = ["batch_metrics", "turn_summary"]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _keys(turns: list[Turn]) -> list[str]:
    return sorted({k for t in turns for k in t.metrics})


def _real(episodes: Sequence[Episode]) -> list[Episode]:
    return [ep for ep in episodes if ep.turns and not ep.padding]


def batch_metrics(episodes: Sequence[Episode]) -> dict[str, list[float]]:
    """Per-episode values (to be averaged by the metric logger): ``reward/total`` and the last
    turn's ``reward/<key>``."""
    eps = _real(episodes)
    keys = _keys([ep.turns[-1] for ep in eps])
    out = {"reward/total": [sum(t.unnormalized_reward for t in ep.turns) for ep in eps]}
    for key in keys:
        out[f"reward/{key}"] = [ep.turns[-1].metrics.get(key, 0.0) for ep in eps]
    return out


def turn_summary(episodes: Sequence[Episode]) -> dict[str, float]:
    """Per-turn, best-so-far, best and last-turn means over ``episodes`` (see the module doc)."""
    eps = _real(episodes)
    if not eps:
        return {}
    keys = _keys([t for ep in eps for t in ep.turns])
    out: dict[str, float] = {}
    horizon = max(len(ep.turns) for ep in eps)
    for k in range(1, horizon + 1):
        ran = [ep.turns[k - 1] for ep in eps if len(ep.turns) >= k]
        out[f"turn/{k}/episodes"] = float(len(ran))
        out[f"turn/{k}/reward"] = _mean([t.unnormalized_reward for t in ran])
        for key in keys:
            out[f"turn/{k}/{key}"] = _mean([t.metrics.get(key, 0.0) for t in ran])
            out[f"best_by_turn/{k}/{key}"] = _mean([max(t.metrics.get(key, 0.0) for t in ep.turns[:k]) for ep in eps])
    for name, pick in (("best", max), ("last", lambda xs: xs[-1])):
        out[f"{name}/reward"] = _mean([pick([t.unnormalized_reward for t in ep.turns]) for ep in eps])
        for key in keys:
            out[f"{name}/{key}"] = _mean([pick([t.metrics.get(key, 0.0) for t in ep.turns]) for ep in eps])
    out["episode/turns"] = _mean([float(len(ep.turns)) for ep in eps])
    return out
