"""Per-turn and best-over-turns results of multi-turn episodes (training metrics and STTS reports).

For a set of episodes (any tasks), with ``info`` keys ``correct``, ``speedup`` and
``timing_available`` as the kernel environments write them:

* ``turn/{k}/{reward,correct,fast_1}`` — over the episodes that ran turn ``k``; ``turn/{k}/episodes``
  how many did;
* ``best_by_turn/{k}/correct`` — fraction of *all* episodes solved at some turn ``<= k`` (an episode
  that stopped early keeps its best), i.e. the best-so-far curve;
* ``best/{reward,correct,fast_1}`` — best over all turns; ``last/...`` — the last turn.

``fast_1`` (correct and faster than the reference) appears only when some turn was timed.
"""

from __future__ import annotations

from collections.abc import Sequence

from forge_kernels.types import Episode, Turn

__all__ = ["turn_summary"]


def _correct(t: Turn) -> float:
    return float(bool(t.info.get("correct")))


def _fast(t: Turn, p: float) -> float:
    return float(bool(t.info.get("correct")) and (t.info.get("speedup") or 0.0) > p)


def _raw_reward(t: Turn) -> float:
    return float(t.info.get("raw_reward", t.reward))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def turn_summary(episodes: Sequence[Episode]) -> dict[str, float]:
    """Per-turn, best-so-far, best and last-turn means over ``episodes`` (see the module doc)."""
    eps = [ep for ep in episodes if ep.turns]
    if not eps:
        return {}
    timed = any(t.info.get("timing_available") for ep in eps for t in ep.turns)
    out: dict[str, float] = {}
    horizon = max(len(ep.turns) for ep in eps)
    for k in range(1, horizon + 1):
        ran = [ep.turns[k - 1] for ep in eps if len(ep.turns) >= k]
        out[f"turn/{k}/episodes"] = float(len(ran))
        out[f"turn/{k}/reward"] = _mean([_raw_reward(t) for t in ran])
        out[f"turn/{k}/correct"] = _mean([_correct(t) for t in ran])
        out[f"best_by_turn/{k}/correct"] = _mean([max(_correct(t) for t in ep.turns[:k]) for ep in eps])
        if timed:
            out[f"turn/{k}/fast_1"] = _mean([_fast(t, 1.0) for t in ran])
    for name, pick in (("best", max), ("last", lambda xs: xs[-1])):
        out[f"{name}/reward"] = _mean([pick([_raw_reward(t) for t in ep.turns]) for ep in eps])
        out[f"{name}/correct"] = _mean([pick([_correct(t) for t in ep.turns]) for ep in eps])
        if timed:
            out[f"{name}/fast_1"] = _mean([pick([_fast(t, 1.0) for t in ep.turns]) for ep in eps])
    out["episode/turns"] = _mean([float(len(ep.turns)) for ep in eps])
    return out
