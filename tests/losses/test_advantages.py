"""Advantage estimators: golden values, varying group sizes, invalid samples, episodes, properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_kernels.types import Completion, Episode, Turn
from losses.advantages import (
    assign_advantages,
    dr_grpo_advantages,
    group_advantages,
    grpo_advantages,
    returns_to_go,
    rloo_advantages,
)


def test_grpo_dr_grpo_rloo_golden():
    r = [1.0, 0.0, 0.0, 1.0]  # mean 0.5, unbiased std sqrt(1/3)
    std = math.sqrt(1 / 3)
    assert grpo_advantages(r, eps=0.0).tolist() == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])
    assert dr_grpo_advantages(r).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert rloo_advantages(r).tolist() == pytest.approx([1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3])


def test_invalid_samples_are_excluded_and_get_zero():
    r = [1.0, 100.0, 0.0, 0.5]
    valid = [True, False, True, True]
    assert dr_grpo_advantages(r, valid).tolist() == pytest.approx([0.5, 0.0, -0.5, 0.0])
    assert rloo_advantages(r, valid).tolist() == pytest.approx([1 - 0.25, 0.0, -0.75, 0.0])
    assert grpo_advantages(r, valid, eps=0.0).tolist() == pytest.approx([1.0, 0.0, -1.0, 0.0])  # std 0.5
    assert grpo_advantages(r, [False] * 4).tolist() == [0.0] * 4


def test_groups_of_one():
    assert grpo_advantages([3.0]).tolist() == [0.0]
    assert dr_grpo_advantages([3.0]).tolist() == [0.0]
    assert rloo_advantages([3.0]).tolist() == [3.0]  # no baseline: A = G
    assert rloo_advantages([3.0, 7.0], [True, False]).tolist() == [3.0, 0.0]


def test_group_advantages_with_varying_group_sizes():
    rewards = [1.0, 0.0, 5.0, 2.0, 4.0, 9.0]
    groups = ["a", "a", "b", "b", "b", "c"]
    out = group_advantages(rewards, groups, "rloo")
    assert out.tolist() == pytest.approx([1.0, -1.0, 2.0, -2.5, 0.5, 9.0])
    with pytest.raises(ValueError, match="'ppo'.*grpo, dr_grpo, rloo, trloo"):
        group_advantages(rewards, groups, "ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="6 rewards but 2 group ids"):
        group_advantages(rewards, ["a", "b"])
    with pytest.raises(ValueError, match="finite"):
        group_advantages([float("nan")], ["a"])


def test_returns_to_go_golden():
    assert returns_to_go([1.0, 0.0, 2.0], gamma=0.5) == pytest.approx([1.5, 1.0, 2.0])
    assert returns_to_go([1.0, 2.0]) == [3.0, 2.0]
    with pytest.raises(ValueError, match="gamma"):
        returns_to_go([1.0], gamma=1.5)


def _episode(group: str, rewards: list[float]) -> Episode:
    turns = [
        Turn(completion=Completion([1], [2], "x", [-0.1], policy_version=0), reward=r) for r in rewards
    ]
    return Episode(episode_id=f"{group}-{id(turns)}", group_id=group, task_name="t", turns=turns)


def test_trloo_on_multi_turn_episodes_golden():
    # prompt p: three episodes with 2, 1 and 2 turns; gamma = 0.5
    eps = [_episode("p", [1.0, 2.0]), _episode("p", [0.0]), _episode("p", [0.0, 4.0]), _episode("q", [3.0])]
    metrics = assign_advantages(eps, "trloo", gamma=0.5)
    # returns-to-go: e0 [2, 2]; e1 [0]; e2 [2, 4]; e3 [3]
    # turn 0 of p: G = [2, 0, 2] -> A = G - mean(others) = [1, -2, 1]
    # turn 1 of p: G = [2, 4] -> A = [-2, 2]; q alone -> A = G = 3
    assert [t.advantage for t in eps[0].turns] == pytest.approx([1.0, -2.0])
    assert [t.advantage for t in eps[1].turns] == pytest.approx([-2.0])
    assert [t.advantage for t in eps[2].turns] == pytest.approx([1.0, 2.0])
    assert [t.advantage for t in eps[3].turns] == pytest.approx([3.0])
    assert metrics["advantages/mean"] == pytest.approx((1 - 2 - 2 + 1 + 2 + 3) / 6)


def test_episode_level_estimator_and_invalid_episodes():
    eps = [_episode("p", [1.0, 1.0]), _episode("p", [0.0]), _episode("p", [7.0]), _episode("p", [])]
    metrics = assign_advantages(eps, "dr_grpo", is_valid=lambda e: e.rewards != [7.0])
    # episode returns 2 and 0 (7 is invalid, the empty one too) -> mean 1
    assert [t.advantage for t in eps[0].turns] == [1.0, 1.0]
    assert eps[1].turns[0].advantage == -1.0
    assert eps[2].turns[0].advantage == 0.0
    assert metrics["advantages/invalid_episodes"] == 2.0
    with pytest.raises(ValueError, match="'gae'"):
        assign_advantages(eps, "gae")  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=12))
def test_rloo_is_n_over_n_minus_1_times_mean_centred(rewards):
    n = len(rewards)
    expected = dr_grpo_advantages(rewards) * n / (n - 1)
    assert torch.allclose(rloo_advantages(rewards), expected, atol=1e-9)
    # and TRLOO on single-turn episodes is exactly that
    eps = [_episode("g", [r]) for r in rewards]
    assign_advantages(eps, "trloo")
    assert torch.allclose(torch.tensor([e.turns[0].advantage for e in eps], dtype=torch.float64), expected, atol=1e-9)
