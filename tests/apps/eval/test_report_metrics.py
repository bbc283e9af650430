"""apps.eval.report against hand-worked cases: pass@k, fast_p, geomeans, turn selection."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from apps.eval.report import (
    SampleRecord,
    better,
    fast_p,
    geometric_mean,
    group_by_task,
    pass_at_k,
    select_turn,
    summarize,
)


def rec(task: str, sample: int, *, correct: bool = False, compiled: bool | None = None, speedup: float | None = None,
        vs_compile: float | None = None, turn: int = 1, fault: str | None = None, extracted: bool = True,
        reward: float | None = None) -> SampleRecord:
    compiled = correct if compiled is None else compiled
    fault = fault or ("none" if correct else ("output_value_mismatch" if compiled else "syntax_error"))
    return SampleRecord(task=task, sample=sample, turn=turn, extracted=extracted, compiled=compiled, correct=correct,
                        fault=fault, speedup=speedup, speedup_vs_compile=vs_compile, reward=reward)


def test_pass_at_k_hand_worked():
    # n=5, c=2: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass@3 = 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(5, 2, 4) == 1.0  # n - c = 3 < k: every 4-subset holds a correct sample
    assert pass_at_k(5, 0, 5) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 0, 4) == 0.0


def test_pass_at_k_equals_subset_enumeration():
    """The estimator is the probability that a random k-subset of the n samples holds a correct one."""
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(outcomes, k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="1 <= k <= n=3, got k=4"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)


def two_tasks() -> dict[str, list[SampleRecord]]:
    # task a: speedups 1.5 (correct), 0.8 (correct), incorrect -> per-sample fast_1 = 1/3
    # task b: one correct sample at exactly 1.0 (not > 1), one incorrect but "fast" (must not count)
    return group_by_task([
        rec("a", 0, correct=True, speedup=1.5, vs_compile=0.9),
        rec("a", 1, correct=True, speedup=0.8, vs_compile=0.5),
        rec("a", 2, compiled=True, speedup=3.0),
        rec("b", 0, correct=True, speedup=1.0, vs_compile=1.25),
        rec("b", 1, compiled=True, speedup=5.0),
    ])


def test_fast_p_strict_definition_hand_worked():
    by_task = two_tasks()
    # fast_0 = correctness: a 2/3, b 1/2 -> mean 7/12
    assert fast_p(by_task, 0.0) == pytest.approx((2 / 3 + 1 / 2) / 2)
    # fast_1 per sample: a 1/3 (1.5 > 1), b 0 (1.0 is not > 1, the 5.0 is incorrect)
    assert fast_p(by_task, 1.0) == pytest.approx((1 / 3 + 0) / 2)
    assert fast_p(by_task, 1.0, aggregate="best_of_n") == pytest.approx(0.5)
    assert fast_p(by_task, 1.5) == 0.0  # 1.5 is not > 1.5
    assert fast_p(by_task, 1.2, aggregate="best_of_n") == pytest.approx(0.5)
    # against torch.compile: a none > 1, b 1.25 > 1.2
    assert fast_p(by_task, 1.0, "compile", "best_of_n") == pytest.approx(0.5)
    assert fast_p(by_task, 1.2, "compile") == pytest.approx((0 + 1 / 2) / 2)
    assert fast_p(by_task, 0.0, aggregate="best_of_n") == 1.0  # fast_0 best-of-n = pass@n


def test_fast_p_is_unknown_without_timing_but_zero_without_correct_samples():
    untimed = group_by_task([rec("a", 0, correct=True), rec("a", 1)])
    assert fast_p(untimed, 1.0) is None
    assert fast_p(untimed, 0.0) == 0.5  # fast_0 needs no timing
    nothing_correct = group_by_task([rec("a", 0), rec("a", 1, compiled=True)])
    assert fast_p(nothing_correct, 2.0) == 0.0
    partly_timed = group_by_task([rec("a", 0, correct=True, speedup=2.5), rec("a", 1, correct=True)])
    assert fast_p(partly_timed, 2.0) == 0.5  # the untimed correct sample counts as not fast


def test_geometric_mean():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([]) is None


def test_summarize_hand_worked():
    s = summarize([r for rs in two_tasks().values() for r in rs] + [], ks=[1, 2, 3])
    assert (s.tasks, s.samples, s.samples_per_task) == (2, 5, 2)
    assert s.correct_rate == pytest.approx(7 / 12)
    assert s.compile_rate == 1.0 and s.extract_rate == 1.0
    assert set(s.pass_at_k) == {1, 2}  # k=3 > n_min=2 is dropped
    assert s.pass_at_k[1] == pytest.approx(7 / 12)
    # task a (n=3, c=2) pass@2 = 1; task b (n=2, c=1) pass@2 = 1
    assert s.pass_at_k[2] == 1.0
    assert s.fast_p["per_sample"]["eager"][1.0] == pytest.approx(1 / 6)
    assert s.fast_p["best_of_n"]["compile"][1.2] == pytest.approx(0.5)
    # correct samples: 1.5, 0.8, 1.0 -> (1.2) ** (1/3); best per task: 1.5 and 1.0
    assert s.geomean_speedup["eager"] == pytest.approx(1.2 ** (1 / 3))
    assert s.geomean_best_speedup["eager"] == pytest.approx(math.sqrt(1.5))
    assert s.geomean_speedup["compile"] == pytest.approx((0.9 * 0.5 * 1.25) ** (1 / 3))
    assert s.geomean_best_speedup["compile"] == pytest.approx(math.sqrt(0.9 * 1.25))
    assert (s.timed_correct, s.untimed_correct) == (3, 0)
    assert s.fault_counts == {"none": 3, "output_value_mismatch": 2}
    assert s.mean_reward is None


def test_summarize_counts_no_code_and_rewards():
    s = summarize([rec("a", 0, extracted=False, fault="no_code", reward=0.0),
                   rec("a", 1, correct=True, reward=1.0)])
    assert s.extract_rate == 0.5 and s.correct_rate == 0.5
    assert s.fault_counts == {"no_code": 1, "none": 1}
    assert s.mean_reward == 0.5
    assert s.fast_p["per_sample"]["eager"][1.0] is None and s.untimed_correct == 1
    assert s.pass_at_k == {1: 0.5, 2: 1.0}


def test_summarize_rejects_two_turns_of_one_sample():
    with pytest.raises(ValueError, match="several records for one sample"):
        summarize([rec("a", 0, turn=1), rec("a", 0, turn=2)])


def test_select_turn_last_and_best_so_far():
    ep1 = [rec("a", 0, turn=1, compiled=True), rec("a", 0, turn=2, correct=True, speedup=1.3),
           rec("a", 0, turn=3, compiled=True)]  # regressed at turn 3
    ep2 = [rec("a", 1, turn=1, correct=True, speedup=0.7)]  # solved at turn 1, stopped early
    assert [r.turn for r in select_turn([ep1, ep2], 3, "last")] == [3, 1]
    assert [r.turn for r in select_turn([ep1, ep2], 3, "best")] == [2, 1]
    assert [r.turn for r in select_turn([ep1, ep2], 1, "best")] == [1, 1]
    # a faster correct turn beats an earlier correct one; equal ranks keep the earlier turn
    assert better(rec("a", 0, correct=True, speedup=1.1), rec("a", 0, turn=2, correct=True, speedup=1.4)).turn == 2
    assert better(rec("a", 0, compiled=True), rec("a", 0, turn=2, compiled=True)).turn == 1
    with pytest.raises(ValueError, match="turn must be >= 1"):
        select_turn([ep1], 0, "last")
