"""Isolated kernel evaluation: correctness, timing, fault classes, hack detection, profiling.

    from forge_kernels.eval import Evaluator, EvalOptions
    with Evaluator() as ev:
        result = ev.evaluate(task, candidate_code, EvalOptions(trials=3))

See the README's "Kernel evaluation" section for the guarantees, fault classes and hack checks.
"""

from forge_kernels.eval.evaluator import Evaluator, hack_summary
from forge_kernels.eval.faults import FaultClass, HackFlag
from forge_kernels.eval.results import EvalOptions, EvalResult, HackFinding, RuntimeStats, Tolerance, TrialResult

__all__ = [
    "Evaluator",
    "EvalOptions",
    "EvalResult",
    "FaultClass",
    "HackFinding",
    "HackFlag",
    "RuntimeStats",
    "Tolerance",
    "TrialResult",
    "hack_summary",
]
