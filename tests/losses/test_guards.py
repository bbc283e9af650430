"""Off-policy guards: TIS truncation, MRS trajectory rejection, PRS sampling, composition."""

from __future__ import annotations


import pytest
import torch
from pydantic import ValidationError

from forge_kernels.types import Completion, Turn
from losses.guards import MRSGuard, PRSGuard, TISGuard, apply_token_guards


def _logs(ratios):
    return torch.log(torch.tensor(ratios, dtype=torch.float64))


def test_tis_truncates_weights_and_reports_rate():
    trainer = _logs([[1.0, 3.0, 0.5], [2.0, 10.0, 1.0]])
    gen = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    res = TISGuard(cap=2.0)(trainer, gen, mask)
    assert res.weight.flatten().tolist() == pytest.approx([1.0, 2.0, 0.5, 2.0, 2.0, 1.0])
    assert res.keep.all()
    assert res.metrics["guard/tis_rejection_rate"].item() == pytest.approx(2 / 5)


def test_mrs_keeps_trajectories_by_geometric_mean_and_veto():
    trainer = _logs([[1.0, 1.0], [1.2, 1 / 1.2], [1.01, 1.0], [1.0, 1e-5], [1.0, 1.0]])
    gen = torch.zeros(5, 2, dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0], [0, 0]])
    guard = MRSGuard()
    res = guard(trainer, gen, mask)
    # row 1: geo mean 1 (kept even though tokens are off); row 2: sqrt(1.01) > 1.001 (rejected);
    # row 3: the vetoed token is masked out, so kept; row 4 has no tokens (not counted)
    assert res.keep[:, 0].tolist() == [True, True, False, True, True]
    assert res.metrics["guard/mrs_rejection_rate"].item() == pytest.approx(1 / 4)
    vetoed = guard(trainer, gen, torch.tensor([[1, 1], [1, 1], [0, 0], [1, 1], [0, 0]]))
    assert vetoed.keep[:, 0].tolist() == [True, True, True, False, True]  # ratio 1e-5 < veto 1e-4
    with pytest.raises(ValidationError, match="lower <= 1 <= upper"):
        MRSGuard(lower=1.01, upper=1.02)


def test_token_guards_compose():
    trainer = _logs([[3.0, 3.0], [1.0, 1.0]])
    gen = torch.zeros(2, 2, dtype=torch.float64)
    res = apply_token_guards([TISGuard(cap=2.0), MRSGuard()], trainer, gen, torch.ones(2, 2))
    assert res.keep[:, 0].tolist() == [False, True]
    assert res.weight.flatten().tolist() == pytest.approx([2.0, 2.0, 1.0, 1.0])
    assert set(res.metrics) == {"guard/tis_rejection_rate", "guard/mrs_rejection_rate", "guard/mrs_min_token_ratio"}


def test_prs_keep_probability_and_seeded_sampling():
    guard = PRSGuard()
    assert guard.keep_probability(torch.tensor([0.2, 0.3, 0.35, 0.4, 0.9])).tolist() == pytest.approx(
        [0.0, 0.0, 0.5, 1.0, 1.0]
    )
    n = 4000
    correct = torch.tensor([True] * n + [False] * n)
    pr = torch.cat([torch.full((n,), 0.35), torch.full((n,), 0.0)])
    keep, metrics = guard(correct, pr)
    assert keep[n:].all()  # incorrect turns are always kept
    kept_frac = keep[:n].double().mean().item()
    assert abs(kept_frac - 0.5) < 0.04
    assert metrics["guard/prs_rejection_rate"].item() == pytest.approx((1 - kept_frac) / 2)
    again, _ = PRSGuard()(correct, pr)
    assert torch.equal(keep, again)  # same seed, same draws
    other, _ = PRSGuard(seed=1)(correct, pr)
    assert not torch.equal(keep, other)


def test_prs_on_turns_and_errors():
    def turn(info):
        return Turn(completion=Completion([1], [2], "x", [-0.1], 0), info=info)

    turns = [turn({"correct": True, "profiling_ratio": 0.9}), turn({"correct": True, "profiling_ratio": 0.1}),
             turn({"correct": False})]
    keep, metrics = PRSGuard().keep_turns(turns)
    assert keep == [True, False, True]
    assert metrics["guard/prs_rejection_rate"].item() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="profiling_ratio"):
        PRSGuard().keep_turns([turn({"correct": True})])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        PRSGuard()(torch.tensor([True]), torch.tensor([1.5]))
    with pytest.raises(ValidationError):
        PRSGuard(scale=0.0)
    assert PRSGuard(tau=0.5, scale=0.2).keep_probability(torch.tensor(0.6)).item() == pytest.approx(0.5)
