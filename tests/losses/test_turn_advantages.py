"""Returns-to-go and per-turn advantages against hand-worked examples.

One group of three episodes (early stopping leaves them with 2, 1 and 3 turns):

    e0 rewards [0, 1]       e1 rewards [1]       e2 rewards [0, 0, 0.5]

Kevin (gamma = 0.4):  G(e0) = [0 + 0.4*1, 1] = [0.4, 1]
                      G(e1) = [1]
                      G(e2) = [0 + 0.4*0.2, 0 + 0.4*0.5, 0.5] = [0.08, 0.2, 0.5]
Dr. Kernel (gamma = 1): G(e0) = [1, 1], G(e1) = [1], G(e2) = [0.5, 0.5, 0.5]
"""

from __future__ import annotations

import pytest

from forge_kernels.types import Completion, Episode, Turn
from losses.advantages import assign_advantages, returns_to_go


def group(*reward_lists):
    eps = []
    for i, rewards in enumerate(reward_lists):
        turns = [Turn(Completion([1], [2], "", [0.0], 0), reward=r) for r in rewards]
        eps.append(Episode(f"e{i}", "g", "t", turns))
    return eps


def advantages(episodes):
    return [[round(t.advantage, 4) for t in ep.turns] for ep in episodes]


def test_returns_to_go_kevin_and_dr_kernel():
    assert returns_to_go([0, 0, 0.5], 0.4) == pytest.approx([0.08, 0.2, 0.5])
    assert returns_to_go([0, 1], 0.4) == pytest.approx([0.4, 1.0])
    assert returns_to_go([0, 0, 0.5], 1.0) == pytest.approx([0.5, 0.5, 0.5])
    assert returns_to_go([0.2, 0.3, 1.0], 0.0) == pytest.approx([0.2, 0.3, 1.0])  # gamma 0: each turn alone
    with pytest.raises(ValueError, match="gamma must be in"):
        returns_to_go([1.0], 1.5)


def test_trloo_per_turn_gamma_0_4():
    eps = group([0, 1], [1], [0, 0, 0.5])
    assign_advantages(eps, "trloo", gamma=0.4)
    # turn 1: G = [0.4, 1, 0.08]; A_i = G_i - mean of the other two
    #   e0: 0.4 - (1 + 0.08)/2 = -0.14   e1: 1 - (0.4 + 0.08)/2 = 0.76   e2: 0.08 - (0.4 + 1)/2 = -0.62
    # turn 2: G = [1 (e0), 0.2 (e2)]:  e0: 1 - 0.2 = 0.8   e2: 0.2 - 1 = -0.8
    # turn 3: e2 alone: no one to leave out, A = G = 0.5
    assert advantages(eps) == [[-0.14, 0.8], [0.76], [-0.62, -0.8, 0.5]]


def test_trloo_per_turn_gamma_1():
    eps = group([0, 1], [1], [0, 0, 0.5])
    assign_advantages(eps, "trloo", gamma=1.0)
    # turn 1: G = [1, 1, 0.5]: e0: 1 - 0.75 = 0.25, e1: 0.25, e2: 0.5 - 1 = -0.5
    # turn 2: G = [1, 0.5]: e0: 0.5, e2: -0.5;  turn 3: e2 alone: 0.5
    assert advantages(eps) == [[0.25, 0.5], [0.25], [-0.5, -0.5, 0.5]]


def test_grpo_per_turn_gamma_1():
    eps = group([0, 1], [1], [0, 0, 0.5])
    assign_advantages(eps, "grpo", gamma=1.0, per_turn=True)
    # turn 1: G = [1, 1, 0.5], mean 5/6, Bessel std sqrt((1/36 + 1/36 + 1/9) / 2) = sqrt(1/12) = 0.288675
    #   A = [(1/6)/0.288675, same, (-1/3)/0.288675] = [0.5774, 0.5774, -1.1547]
    # turn 2: G = [1, 0.5], mean 0.75, std sqrt((0.0625 * 2) / 1) = 0.35355: A = [0.7071, -0.7071]
    adv = advantages(eps)
    assert adv[0][0] == adv[1][0] == pytest.approx(0.5774, abs=1e-4)
    assert adv[2][0] == pytest.approx(-1.1547, abs=1e-4)
    assert adv[0][1] == pytest.approx(0.7071, abs=1e-4) and adv[2][1] == pytest.approx(-0.7071, abs=1e-4)


def test_grpo_per_turn_lone_turn_gets_zero_and_episode_level_shares_one_advantage():
    eps = group([0, 1], [1], [0, 0, 0.5])
    assign_advantages(eps, "grpo", gamma=1.0, per_turn=True)
    assert eps[2].turns[2].advantage == 0.0  # a group of one carries no GRPO signal
    eps = group([0, 1], [1], [0, 0, 0.5])
    assign_advantages(eps, "rloo", gamma=0.4)  # episode level: reward = G at turn 1 = [0.4, 1, 0.08]
    assert advantages(eps) == [[-0.14, -0.14], [0.76], [-0.62, -0.62, -0.62]]


def test_invalid_episodes_are_left_out_of_every_turn_group():
    eps = group([0, 1], [1], [0, 0, 0.5])
    assign_advantages(eps, "trloo", gamma=1.0, is_valid=lambda ep: ep.episode_id != "e1")
    # turn 1 without e1: G = [1, 0.5]: e0: 0.5, e2: -0.5
    assert advantages(eps) == [[0.5, 0.5], [0.0], [-0.5, -0.5, 0.5]]
