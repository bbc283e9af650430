"""From the environment's Outcome.info to metrics records: the timed (GPU) path, checked on CPU with
EvalResults as the evaluator builds them."""

from __future__ import annotations

import pytest

from apps.eval.rollout import record_from_turn
from forge_kernels.env.kernel import kernel_info
from forge_kernels.eval import EvalResult, FaultClass
from apps.eval.report import summarize
from forge_kernels.types import Completion, Turn


def turn(info: dict, reward: float = 1.0, index: int = 1, reward_valid: bool = True) -> Turn:
    completion = Completion(prompt_ids=[1], token_ids=[5, 6, 7], text="...", logprobs=[0.0] * 3, policy_version=0)
    return Turn(completion, reward=reward, info=info, index=index, reward_valid=reward_valid)


def timed(speedup: float, vs_compile: float) -> EvalResult:
    return EvalResult(task="level1/relu", device="NVIDIA H100 80GB HBM3", compiled=True, correct=True,
                      fault=FaultClass.NONE, timing_available=True, speedup=speedup, speedup_vs_compile=vs_compile)


def test_timed_result_keeps_both_speedups():
    record = record_from_turn("level1/relu", 3, turn(kernel_info(timed(1.7, 0.9), True), index=2))
    assert (record.sample, record.turn, record.correct, record.fault) == (3, 2, True, "none")
    assert (record.speedup, record.speedup_vs_compile) == (1.7, 0.9)
    assert record.completion_tokens == 3 and record.reward == 1.0


def test_no_code_and_scorer_failure():
    no_code = record_from_turn("t", 0, turn({**kernel_info(None, False), "parse_failure": "no_code_block"}, 0.0))
    assert (no_code.extracted, no_code.compiled, no_code.fault, no_code.reward) == (False, False, "no_code", 0.0)
    broken = EvalResult(task="t", device="cpu", compiled=False, correct=False, fault=FaultClass.INTERNAL_ERROR)
    failed = record_from_turn("t", 1, turn(kernel_info(broken, True), 0.0, reward_valid=False))
    assert failed.fault == "internal_error" and failed.reward is None  # no reward, not a zero reward


def test_records_feed_fast_p_against_both_baselines():
    records = [record_from_turn("a", i, turn(kernel_info(timed(s, c), True)))
               for i, (s, c) in enumerate([(1.7, 0.9), (1.1, 1.3)])]
    s = summarize(records)
    assert s.fast_p["per_sample"]["eager"][1.5] == pytest.approx(0.5)
    assert s.fast_p["per_sample"]["compile"][1.2] == pytest.approx(0.5)
    assert s.fast_p["best_of_n"]["compile"][1.0] == 1.0
    assert s.geomean_speedup["eager"] == pytest.approx((1.7 * 1.1) ** 0.5)
