"""Training rows of multi-turn episodes, checked token by token."""

from __future__ import annotations

import pytest
import torch

from actors.engines.batching import collate_turns, is_prefix_chained
from forge_kernels.types import Completion, Episode, Turn

PAD, IGNORE = 0, -100
P = [10, 11, 12]          # first prompt
A = [20, 21, 2]           # turn 1 sampled (ends with the stop token)
B = [30, 31]              # boundary + feedback + assistant opening
C = [40, 41]              # turn 2 sampled


def turn(prompt, sampled, adv, version=0, logprob_base=0.0):
    lp = [-(logprob_base + i / 10) for i in range(len(sampled))]
    return Turn(Completion(list(prompt), list(sampled), "", lp, version), advantage=adv)


def two_turn_episode(ref=None, versions=(3, 4)):
    return Episode("e0", "g0", "t", [turn(P, A, 0.5, versions[0], 1.0), turn(P + A + B, C, -2.0, versions[1], 2.0)],
                   ref_logprobs=ref)


def test_chained_episode_is_one_row_with_each_turns_tokens_masked_and_credited():
    ep = two_turn_episode(ref=[-0.1, -0.2, -0.3, -0.4, -0.5])
    assert is_prefix_chained(ep)
    b = collate_turns([ep], pad_id=PAD, ignore_index=IGNORE)
    assert b.input_ids.tolist() == [P + A + B + C]
    assert b.target_ids.tolist() == [[11, 12, 20, 21, 2, 30, 31, 40, 41, IGNORE]]
    # position j predicts token j+1: A sits at 3..5 -> mask 2..4; C at 8..9 -> mask 7..8
    assert b.loss_mask.int().tolist() == [[0, 0, 1, 1, 1, 0, 0, 1, 1, 0]]
    assert b.advantages.tolist() == [[0, 0, 0.5, 0.5, 0.5, 0, 0, -2.0, -2.0, 0]]
    expected_lp = [0, 0, -1.0, -1.1, -1.2, 0, 0, -2.0, -2.1, 0]
    assert torch.allclose(b.generator_logprobs, torch.tensor([expected_lp]))
    expected_ref = [0, 0, -0.1, -0.2, -0.3, 0, 0, -0.4, -0.5, 0]
    assert torch.allclose(b.ref_logprobs, torch.tensor([expected_ref]))
    assert b.policy_versions == [3]  # the oldest turn's version


def test_masked_targets_are_exactly_the_sampled_ids_in_order():
    ep = two_turn_episode()
    b = collate_turns([ep], pad_id=PAD, ignore_index=IGNORE)
    assert b.target_ids[b.loss_mask].tolist() == A + C


def test_unchained_turns_get_one_row_each():
    # an STTS-style second prompt that dropped the first reply: not a prefix chain
    ep = Episode("e1", "g0", "t", [turn(P, A, 1.0), turn(P + B, C, 3.0)], ref_logprobs=[-1, -2, -3, -4, -5])
    assert not is_prefix_chained(ep)
    b = collate_turns([ep], pad_id=PAD, ignore_index=IGNORE)
    assert b.input_ids.tolist() == [P + A + [PAD], P + B + C]
    assert b.loss_mask.int().tolist() == [[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 0]]
    assert b.advantages.tolist() == [[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 3, 3, 0]]
    assert b.ref_logprobs.tolist() == [[0, 0, -1, -2, -3, 0, 0], [0, 0, 0, 0, -4, -5, 0]]


def test_packing_can_be_turned_off_and_single_turn_rows_are_unchanged():
    single = Episode("s", "g1", "t", [turn([5, 6], [7, 8, 9], 1.5)])
    b = collate_turns([two_turn_episode(), single], pad_id=PAD, ignore_index=IGNORE, pack_episodes=False)
    assert len(b) == 3
    assert b.loss_mask.int().tolist()[2] == [0, 1, 1, 1] + [0] * 6
    assert b.input_ids.tolist()[2] == [5, 6, 7, 8, 9] + [PAD] * 5
    assert b.policy_versions == [3, 4, 0]


def test_wrong_number_of_ref_logprobs_is_named():
    with pytest.raises(ValueError, match="2 ref logprobs for 5 sampled tokens"):
        collate_turns([two_turn_episode(ref=[-1.0, -2.0])], pad_id=PAD)
