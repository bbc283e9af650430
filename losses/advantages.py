"""Advantage estimators over groups of samples of the same prompt.

Groups may differ in size and may contain invalid samples (a failed generation, a crashed
evaluation): invalid samples are left out of every group statistic and get advantage 0.

* ``grpo``    - ``(r - mean) / (std + eps)`` (std Bessel-corrected; a group of one gets 0).
* ``dr_grpo`` - ``r - mean`` (Dr. GRPO drops the std, which over-weights easy/hard prompts).
* ``rloo``    - ``r_i - mean_{j != i} r_j = N/(N-1) (r_i - mean)``; a group of one gets ``r``.
* ``trloo``   - turn-level RLOO for multi-turn episodes (Dr. Kernel): per-turn returns-to-go
  ``G_{i,t} = sum_{k >= t} gamma^(k-t) r_{i,k}``, groups are (prompt, turn index), and
  ``A_{i,t} = G_{i,t} - mean_{j != i} G_{j,t}`` (``A = G`` for a group of one).

:func:`group_advantages` works on flat reward lists/tensors with group ids;
:func:`assign_advantages` fills ``Turn.advantage`` of :class:`forge_kernels.types.Episode` s.
For episode-level estimators (grpo, dr_grpo, rloo) each episode's reward is its discounted
return from the first turn and every turn gets the episode's advantage; with ``per_turn=True``
they are applied like TRLOO, to the (prompt, turn index) groups of returns-to-go (GRPO per turn).
A (prompt, turn) group holding one episode (the others stopped earlier) follows the estimator's
group-of-one rule: ``rloo``/``trloo`` give ``A = G``, ``grpo``/``dr_grpo`` give 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Literal, get_args

import torch

from forge_kernels.types import Episode

Estimator = Literal["grpo", "dr_grpo", "rloo", "trloo"]
ESTIMATORS: tuple[str, ...] = get_args(Estimator)

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "assign_advantages",
    "dr_grpo_advantages",
    "group_advantages",
    "grpo_advantages",
    "returns_to_go",
    "rloo_advantages",
]


def _valid_mask(rewards: torch.Tensor, valid: torch.Tensor | Sequence[bool] | None) -> torch.Tensor:
    if valid is None:
        return torch.ones_like(rewards, dtype=torch.bool)
    valid = torch.as_tensor(valid, dtype=torch.bool)
    if valid.shape != rewards.shape:
        raise ValueError(f"valid has shape {tuple(valid.shape)}, rewards {tuple(rewards.shape)}")
    return valid


def _as_rewards(rewards: torch.Tensor | Sequence[float]) -> torch.Tensor:
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.dim() != 1:
        raise ValueError(f"rewards of one group must be 1-D, got shape {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    return r


def grpo_advantages(
    rewards: torch.Tensor | Sequence[float], valid: torch.Tensor | Sequence[bool] | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO advantage of one group: ``(r - mean) / (std + eps)`` over the valid samples."""
    r = _as_rewards(rewards)
    v = _valid_mask(r, valid)
    if not v.any():
        return torch.zeros_like(r)
    rv = r[v]
    std = rv.std() if rv.numel() > 1 else torch.zeros((), dtype=r.dtype)
    return torch.where(v, (r - rv.mean()) / (std + eps), torch.zeros_like(r))


def dr_grpo_advantages(
    rewards: torch.Tensor | Sequence[float], valid: torch.Tensor | Sequence[bool] | None = None
) -> torch.Tensor:
    """Dr. GRPO advantage of one group: ``r - mean`` over the valid samples."""
    r = _as_rewards(rewards)
    v = _valid_mask(r, valid)
    if not v.any():
        return torch.zeros_like(r)
    return torch.where(v, r - r[v].mean(), torch.zeros_like(r))


def rloo_advantages(
    rewards: torch.Tensor | Sequence[float], valid: torch.Tensor | Sequence[bool] | None = None
) -> torch.Tensor:
    """Leave-one-out advantage of one group: ``r_i - mean_{j != i} r_j``; ``r`` alone in its group."""
    r = _as_rewards(rewards)
    v = _valid_mask(r, valid)
    n = int(v.sum())
    if n == 0:
        return torch.zeros_like(r)
    if n == 1:
        return torch.where(v, r, torch.zeros_like(r))
    total = r[v].sum()
    return torch.where(v, r - (total - r) / (n - 1), torch.zeros_like(r))


def returns_to_go(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}`` for each turn of one episode."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"discount gamma must be in [0, 1], got {gamma}")
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def _estimate(estimator: str, rewards: torch.Tensor, valid: torch.Tensor, eps: float) -> torch.Tensor:
    if estimator == "grpo":
        return grpo_advantages(rewards, valid, eps)
    if estimator == "dr_grpo":
        return dr_grpo_advantages(rewards, valid)
    if estimator in ("rloo", "trloo"):  # trloo is rloo applied to (prompt, turn) groups of returns
        return rloo_advantages(rewards, valid)
    raise ValueError(f"unknown advantage estimator {estimator!r}; valid choices: {', '.join(ESTIMATORS)}")


def group_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_ids: Sequence[Hashable],
    estimator: Estimator = "grpo",
    valid: torch.Tensor | Sequence[bool] | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Advantages for a flat list of samples; samples with equal ``group_ids`` form a group."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; valid choices: {', '.join(ESTIMATORS)}")
    r = _as_rewards(rewards)
    if len(group_ids) != r.numel():
        raise ValueError(f"{r.numel()} rewards but {len(group_ids)} group ids")
    v = _valid_mask(r, valid)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        members[g].append(i)
    out = torch.zeros_like(r)
    for idx in members.values():
        index = torch.tensor(idx)
        out[index] = _estimate(estimator, r[index], v[index], eps)
    return out


def assign_advantages(
    episodes: Sequence[Episode],
    estimator: Estimator = "grpo",
    gamma: float = 1.0,
    eps: float = 1e-6,
    is_valid: Callable[[Episode], bool] | None = None,
    per_turn: bool = False,
) -> dict[str, float]:
    """Fill ``turn.advantage`` for every turn of every episode; returns ``advantages/...`` metrics.

    Episodes are grouped by ``group_id``. ``is_valid`` (default: the episode has turns) marks
    episodes to leave out; their turns get advantage 0. ``per_turn`` groups by (prompt, turn)
    for every estimator (``trloo`` always does).
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; valid choices: {', '.join(ESTIMATORS)}")
    valid = [bool(ep.turns) and (is_valid is None or is_valid(ep)) for ep in episodes]
    returns = [returns_to_go(ep.rewards, gamma) for ep in episodes]
    if estimator == "trloo" or per_turn:
        keys, values, slots, flags = [], [], [], []
        for e, ep in enumerate(episodes):
            for t, g in enumerate(returns[e]):
                keys.append((ep.group_id, t))
                values.append(g)
                slots.append((e, t))
                flags.append(valid[e])
        adv = group_advantages(values, keys, estimator, flags, eps).tolist() if values else []
        for (e, t), a in zip(slots, adv):
            episodes[e].turns[t].advantage = a
    else:
        episode_returns = [r[0] if r else 0.0 for r in returns]
        adv = group_advantages(episode_returns, [ep.group_id for ep in episodes], estimator, valid, eps).tolist()
        for ep, a in zip(episodes, adv):
            for turn in ep.turns:
                turn.advantage = a
    all_adv = torch.tensor(
        [t.advantage for ep, ok in zip(episodes, valid) if ok for t in ep.turns], dtype=torch.float64
    )
    return {
        "advantages/mean": float(all_adv.mean()) if all_adv.numel() else 0.0,
        "advantages/std": float(all_adv.std()) if all_adv.numel() > 1 else 0.0,
        "advantages/zero_frac": float((all_adv == 0).double().mean()) if all_adv.numel() else 0.0,
        "advantages/invalid_episodes": float(len(valid) - sum(valid)),
    }
