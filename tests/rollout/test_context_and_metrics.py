"""STTS context selection and the last-turn / best-so-far report, hand-worked."""

from __future__ import annotations

import pytest

from forge_kernels.eval.results import is_fast
from forge_kernels.rollout import Segment, STTSContext, batch_metrics, select_turns, turn_summary
from forge_kernels.types import Completion, Episode, Turn


def test_select_turns_keeps_the_w_best_in_original_order():
    rewards = [0.1, 0.9, 0.3, 0.9, 0.0, 0.5, 0.2]
    # ranked: 0.9 (idx 3, later wins the tie), 0.9 (1), 0.5 (5), 0.3 (2), 0.2 (6), ...
    assert select_turns(rewards, 4) == [1, 2, 3, 5]
    assert select_turns(rewards, 1) == [3]
    assert select_turns(rewards, 0) == []
    assert select_turns(rewards[:3], 4) == [0, 1, 2]  # fewer turns than the window: all of them
    assert select_turns([0.0, 0.0, 0.0], 2) == [1, 2]  # all tied: the most recent
    with pytest.raises(ValueError, match="window must be >= 0"):
        select_turns(rewards, -1)


def test_stts_context_concatenates_the_chosen_turns_ids():
    segs = [Segment([10, 11], [90], 0.2), Segment([20], [91, 92], 1.0), Segment([30, 31], [93], 0.5)]
    assert STTSContext(window=2)([1, 2], segs) == [1, 2, 20, 91, 92, 30, 31, 93]
    assert STTSContext(window=4)([1, 2], segs) == [1, 2, 10, 11, 90, 20, 91, 92, 30, 31, 93]
    assert STTSContext(window=0)([1, 2], segs) == [1, 2]


def ep(*turns, timed=False):
    out = []
    for reward, correct, speedup in turns:
        metrics = {"correct": float(correct)}  # what the kernel environment reports
        if timed:
            metrics["fast_1"] = float(is_fast(correct, speedup, 1.0))
        out.append(Turn(Completion([1], [2], "", [0.0], 0), reward=reward, success=correct, metrics=metrics))
    return Episode("e", "g", "t", out)


def test_turn_summary_last_and_best_so_far():
    eps = [
        ep((0.0, False, None), (1.0, True, 1.5)),                       # solved at turn 2
        ep((1.0, True, 0.8)),                                           # solved at turn 1, stopped
        ep((0.2, False, None), (0.0, False, None), (0.3, False, None)),  # never
        ep((0.0, False, None), (1.0, True, 2.0), (0.5, False, None)),    # solved at 2, broke it at 3
    ]
    s = turn_summary(eps)
    assert s["turn/1/episodes"] == 4 and s["turn/2/episodes"] == 3 and s["turn/3/episodes"] == 2
    assert s["turn/1/correct"] == 0.25                       # 1 of 4
    assert s["turn/2/correct"] == pytest.approx(2 / 3)       # eps 0 and 3 of the 3 that ran turn 2
    assert s["turn/3/correct"] == 0.0
    assert s["turn/1/reward"] == pytest.approx(1.2 / 4)
    assert [s[f"best_by_turn/{k}/correct"] for k in (1, 2, 3)] == [0.25, 0.75, 0.75]
    assert s["best/correct"] == 0.75 and s["last/correct"] == 0.5
    assert s["best/reward"] == pytest.approx((1.0 + 1.0 + 0.3 + 1.0) / 4)
    assert s["last/reward"] == pytest.approx((1.0 + 1.0 + 0.3 + 0.5) / 4)
    assert s["episode/turns"] == pytest.approx(9 / 4)
    assert "best/fast_1" not in s  # nothing was timed


def test_turn_summary_fast_1_when_timed():
    eps = [ep((0.0, False, None), (1.0, True, 1.5), timed=True), ep((1.0, True, 0.8), timed=True)]
    s = turn_summary(eps)
    assert s["turn/1/fast_1"] == 0.0 and s["turn/2/fast_1"] == 1.0
    assert s["best/fast_1"] == 0.5 and s["last/fast_1"] == 0.5
    assert turn_summary([]) == {}


def test_a_metric_some_turns_lack_counts_zero_and_padding_is_left_out():
    timed = ep((1.0, True, 2.0), timed=True)
    untimed = ep((0.0, False, None))  # e.g. no code: never timed, so not fast
    padded = ep((1.0, True, 3.0), timed=True)
    padded.turns[0].padding = True
    m = batch_metrics([timed, untimed, padded])
    assert m["reward/fast_1"] == [1.0, 0.0] and m["reward/correct"] == [1.0, 0.0]
    assert m["reward/total"] == [1.0, 0.0]
    assert turn_summary([timed, untimed])["turn/1/fast_1"] == 0.5
