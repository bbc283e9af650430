"""Correctness verdicts, formed in the evaluator from raw outputs of the two child processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from forge_kernels.eval.faults import FaultClass, HackFlag
from forge_kernels.eval.results import EvalOptions, TrialResult

__all__ = ["Output", "TrialVerdict", "compare_trial", "is_constant"]


@dataclass
class Output:
    """One forward output as reported by a child: metadata plus the tensor, when it was sent."""

    meta: dict[str, Any]
    tensor: torch.Tensor | None = None


@dataclass
class TrialVerdict:
    result: TrialResult
    fault: FaultClass = FaultClass.NONE
    flags: list[tuple[HackFlag, str]] = field(default_factory=list)
    degenerate: bool = False


def is_constant(t: torch.Tensor) -> bool:
    """All elements equal (zeros, a fill value); a one-element tensor is not called constant."""
    if t.numel() <= 1:
        return False
    flat = t.reshape(-1)
    return bool((flat == flat[0]).all()) or bool(torch.isnan(flat).all())


def _fail(trial: TrialResult, fault: FaultClass, why: str, **errors: float | None) -> TrialVerdict:
    trial.passed = False
    trial.mismatch = why
    for k, v in errors.items():
        setattr(trial, k, v)
    return TrialVerdict(trial, fault)


def compare_trial(seed: int, shapes: str, reference: list[Output], candidate: list[Output],
                  options: EvalOptions, expected_device: str) -> TrialVerdict:
    """Compare all outputs of one trial; the first failing output decides the fault."""
    trial = TrialResult(seed=seed, shapes=shapes, passed=True)  # type: ignore[arg-type]
    if len(candidate) != len(reference):
        return _fail(trial, FaultClass.OUTPUT_SHAPE_MISMATCH,
                     f"forward returned {len(candidate)} output(s), the reference returns {len(reference)}")
    worst_abs, worst_rel, degenerate = 0.0, 0.0, False
    flags: list[tuple[HackFlag, str]] = []
    for i, (ref, cand) in enumerate(zip(reference, candidate)):
        if not cand.meta.get("plain_tensor"):
            verdict = _fail(trial, FaultClass.OUTPUT_DTYPE_MISMATCH,
                            f"output {i} is a {cand.meta.get('type')!s}, not a plain torch.Tensor")
            if cand.meta.get("type") not in ("NoneType", "int", "float", "tuple", "list", "dict", "str"):
                verdict.fault = FaultClass.REWARD_HACK
                verdict.flags.append((HackFlag.LAZY_TENSOR, f"output {i} has type {cand.meta.get('type')}, "
                                      "a tensor subclass or lazy object instead of a materialised tensor"))
            return verdict
        if cand.meta.get("aliases_input"):
            flags.append((HackFlag.RETURNS_INPUT, f"output {i} shares storage with an input"))
        rdtype, cdtype = ref.meta["dtype"], cand.meta["dtype"]
        if cdtype != rdtype:
            return _fail(trial, FaultClass.OUTPUT_DTYPE_MISMATCH, f"output {i} has dtype {cdtype}, expected {rdtype}")
        if cand.meta["shape"] != ref.meta["shape"]:
            return _fail(trial, FaultClass.OUTPUT_SHAPE_MISMATCH,
                         f"output {i} has shape {tuple(cand.meta['shape'])}, expected {tuple(ref.meta['shape'])}")
        if cand.meta.get("layout") != "torch.strided":
            return _fail(trial, FaultClass.OUTPUT_DTYPE_MISMATCH, f"output {i} has layout {cand.meta.get('layout')}")
        if not str(cand.meta.get("device", "")).startswith(expected_device):
            return _fail(trial, FaultClass.OUTPUT_VALUE_MISMATCH,
                         f"output {i} is on {cand.meta.get('device')}, expected {expected_device}")
        if ref.tensor is None or cand.tensor is None:
            return _fail(trial, FaultClass.INTERNAL_ERROR, f"output {i} metadata arrived without its data")
        r, c = ref.tensor, cand.tensor
        if not r.is_floating_point():
            if not torch.equal(r, c):
                n = int((r != c).sum())
                return _fail(trial, FaultClass.OUTPUT_VALUE_MISMATCH, f"output {i}: {n} of {r.numel()} elements differ")
            continue
        r64, c64 = r.double(), c.double()
        rnan, cnan = torch.isnan(r64), torch.isnan(c64)
        if not torch.equal(rnan, cnan) or not torch.equal(torch.isinf(r64), torch.isinf(c64)):
            bad = int((rnan != cnan).sum()) + int((torch.isinf(r64) != torch.isinf(c64)).sum())
            return _fail(trial, FaultClass.OUTPUT_NAN,
                         f"output {i}: {bad} element(s) are NaN/Inf where the reference is not (or vice versa)")
        finite = torch.isfinite(r64)
        if not torch.equal(r64[~finite & ~rnan], c64[~finite & ~rnan]):
            return _fail(trial, FaultClass.OUTPUT_NAN, f"output {i}: infinities differ in sign")
        rf, cf = r64[finite], c64[finite]
        if rf.numel() == 0:
            continue
        tol = options.tolerance_for(rdtype)
        diff = (cf - rf).abs()
        max_abs = float(diff.max())
        max_rel = float((diff / rf.abs().clamp_min(1e-12)).max())
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        scale = float(rf.abs().max())
        ok = bool((diff <= tol.atol + tol.rtol * rf.abs()).all())
        if ok and 0 < scale < options.near_zero:
            # Near-zero reference: absolute tolerance alone would pass zeros. Compare at its own scale.
            ok = bool(((cf - rf).abs() / scale <= tol.atol + tol.rtol * rf.abs() / scale).all())
        if scale == 0:
            degenerate = True
        if is_constant(c) and not is_constant(r):
            flags.append((HackFlag.CONSTANT_OUTPUT, f"output {i} is constant ({float(c.reshape(-1)[0])}) while the "
                          "reference varies"))
        if not ok:
            bad = int((diff > tol.atol + tol.rtol * rf.abs()).sum())
            verdict = _fail(trial, FaultClass.OUTPUT_VALUE_MISMATCH,
                            f"output {i}: {bad or 'some'} of {rf.numel()} elements outside atol={tol.atol} "
                            f"rtol={tol.rtol}" + (f" (checked at the reference's scale {scale:.3g})" if not bad else ""),
                            max_abs_error=max_abs, max_rel_error=max_rel)
            verdict.flags = flags
            return verdict
    trial.max_abs_error, trial.max_rel_error = worst_abs, worst_rel
    return TrialVerdict(trial, FaultClass.NONE, flags, degenerate)
