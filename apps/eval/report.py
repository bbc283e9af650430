"""Benchmark metrics over evaluated samples: compile and correctness rates, pass@k, fast_p, speedups.

Input: one :class:`SampleRecord` per (task, sample, turn). :func:`summarize` takes *one record per
sample* (a single-turn run's records, or one record per episode chosen by :func:`select_turn`) and
returns a :class:`MetricsSummary`. Definitions (``T`` tasks, ``n_t`` samples of task ``t``,
``c_t`` of them correct):

* ``compile_rate`` / ``correct_rate``: the mean over tasks of the per-task fraction of samples that
  compiled / were correct (tasks weigh equally; with equal ``n_t`` this is the fraction of samples).
* ``pass_at_k[k]``: the unbiased estimator of Chen et al. (2021),
  ``1 - C(n_t - c_t, k) / C(n_t, k)``, averaged over tasks; reported for ``k <= min n_t``.
* ``fast_p``: KernelBench's strict definition, the fraction of tasks whose kernel is correct
  **and** has speedup ``> p``; ``fast_0`` is therefore the correctness rate. With several samples
  per task two aggregations are reported: ``per_sample`` (each task contributes the fraction of
  its samples that qualify: the expected fast_p of one sample) and ``best_of_n`` (a task counts
  when any of its ``n_t`` samples qualifies: fast_p of the best sample, ``fast_0 = pass@n``).
  Each is computed against the live-timed eager reference (``eager``) and against
  ``torch.compile(reference)`` (``compile``). A correct sample without a measured speedup counts
  as not fast for ``p > 0``; when correct samples exist but *none* has a speedup (the CPU
  interpreter never times), ``fast_p`` for ``p > 0`` is ``None`` (unknown, not zero).
* ``geomean_speedup``: the geometric mean of the speedups of the correct samples that were timed;
  ``geomean_best_speedup``: the same over tasks, each task's fastest correct sample.
* ``fault_counts``: samples per evaluator fault class (``none`` = correct); samples whose reply
  held no code block count as ``no_code``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.eval.results import is_fast

__all__ = [
    "DEFAULT_FAST_P",
    "NO_CODE",
    "Baseline",
    "MetricsSummary",
    "SampleRecord",
    "better",
    "fast_p",
    "geometric_mean",
    "group_by_task",
    "pass_at_k",
    "select_turn",
    "summarize",
]

DEFAULT_FAST_P: tuple[float, ...] = (0.0, 1.0, 1.2, 1.5, 2.0)
NO_CODE = "no_code"
Baseline = Literal["eager", "compile"]


class SampleRecord(StrictModel):
    """The verdict on one sample at one turn (turns count from 1)."""

    task: str
    sample: int = Field(ge=0, description="index of the sample among its task's samples")
    turn: int = Field(default=1, ge=1)
    extracted: bool = Field(description="a code block was found in the reply")
    compiled: bool
    correct: bool
    fault: str = Field(description=f"the evaluator's fault class, or {NO_CODE!r}")
    speedup: float | None = Field(default=None, gt=0, description="eager reference median / candidate median")
    speedup_vs_compile: float | None = Field(default=None, gt=0)
    reward: float | None = None
    completion_tokens: int = 0
    finish_reason: str = "stop"

    def speedup_against(self, baseline: Baseline) -> float | None:
        return self.speedup if baseline == "eager" else self.speedup_vs_compile


class MetricsSummary(StrictModel):
    """Aggregate metrics of one record per sample (see the module docstring for definitions)."""

    tasks: int
    samples: int
    samples_per_task: int = Field(description="the smallest n_t (pass@k is reported for k up to this)")
    extract_rate: float
    compile_rate: float
    correct_rate: float
    pass_at_k: dict[int, float]
    fast_p: dict[Literal["per_sample", "best_of_n"], dict[Baseline, dict[float, float | None]]]
    geomean_speedup: dict[Baseline, float | None]
    geomean_best_speedup: dict[Baseline, float | None]
    timed_correct: int = Field(description="correct samples with a measured speedup vs eager")
    untimed_correct: int = Field(description="correct samples without one (CPU interpreter, timing failure)")
    mean_reward: float | None
    fault_counts: dict[str, int]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``n`` samples, ``c`` correct: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n={n}, got k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i): no huge binomials
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def geometric_mean(values: Iterable[float]) -> float | None:
    """exp(mean(log v)) of positive values; None for none."""
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fast_p(by_task: dict[str, list[SampleRecord]], p: float, baseline: Baseline = "eager",
           aggregate: Literal["per_sample", "best_of_n"] = "per_sample") -> float | None:
    """KernelBench's fast_p over tasks (see the module docstring); None when unknowable."""
    if not by_task:
        raise ValueError("fast_p of zero tasks is undefined")
    if p < 0:
        raise ValueError(f"fast_p needs p >= 0, got {p}")
    correct = [r for rs in by_task.values() for r in rs if r.correct]
    if p > 0 and correct and all(r.speedup_against(baseline) is None for r in correct):
        return None
    per_task = []
    for records in by_task.values():
        hits = [is_fast(r.correct, r.speedup_against(baseline), p) for r in records]
        per_task.append(float(any(hits)) if aggregate == "best_of_n" else sum(hits) / len(hits))
    return sum(per_task) / len(per_task)


def group_by_task(records: Iterable[SampleRecord]) -> dict[str, list[SampleRecord]]:
    """Records grouped by task (first-seen task order), each group sorted by sample index."""
    groups: dict[str, list[SampleRecord]] = defaultdict(list)
    for r in records:
        groups[r.task].append(r)
    for task, rs in groups.items():
        samples = [r.sample for r in rs]
        if len(set(samples)) != len(samples):
            raise ValueError(f"task {task!r} has several records for one sample ({sorted(samples)}); "
                             f"summarize takes one record per sample (use select_turn for multi-turn runs)")
        rs.sort(key=lambda r: r.sample)
    return dict(groups)


def _task_mean(by_task: dict[str, list[SampleRecord]], attr: str) -> float:
    return sum(sum(getattr(r, attr) for r in rs) / len(rs) for rs in by_task.values()) / len(by_task)


def summarize(records: Iterable[SampleRecord], ks: Sequence[int] | None = None,
              ps: Sequence[float] = DEFAULT_FAST_P) -> MetricsSummary:
    """Metrics of one record per sample. ``ks`` defaults to 1 and n (those above n are dropped)."""
    by_task = group_by_task(records)
    if not by_task:
        raise ValueError("no records to summarize")
    n_min = min(len(rs) for rs in by_task.values())
    wanted = sorted(set(ks if ks is not None else (1, n_min)))
    if any(k < 1 for k in wanted):
        raise ValueError(f"pass@k needs k >= 1, got {wanted}")
    flat = [r for rs in by_task.values() for r in rs]
    rewards = [r.reward for r in flat if r.reward is not None]
    baselines: tuple[Baseline, ...] = ("eager", "compile")
    best = {b: [max(s for r in rs if r.correct and (s := r.speedup_against(b)) is not None)
                for rs in by_task.values()
                if any(r.correct and r.speedup_against(b) is not None for r in rs)] for b in baselines}
    return MetricsSummary(
        tasks=len(by_task),
        samples=len(flat),
        samples_per_task=n_min,
        extract_rate=_task_mean(by_task, "extracted"),
        compile_rate=_task_mean(by_task, "compiled"),
        correct_rate=_task_mean(by_task, "correct"),
        pass_at_k={k: sum(pass_at_k(len(rs), sum(r.correct for r in rs), k) for rs in by_task.values())
                   / len(by_task) for k in wanted if k <= n_min},
        fast_p={agg: {b: {p: fast_p(by_task, p, b, agg) for p in ps} for b in baselines}
                for agg in ("per_sample", "best_of_n")},
        geomean_speedup={b: geometric_mean(s for r in flat if r.correct and (s := r.speedup_against(b)) is not None)
                         for b in baselines},
        geomean_best_speedup={b: geometric_mean(best[b]) for b in baselines},
        timed_correct=sum(r.correct and r.speedup is not None for r in flat),
        untimed_correct=sum(r.correct and r.speedup is None for r in flat),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        fault_counts=dict(sorted(Counter(r.fault for r in flat).items())),
    )


def _rank(r: SampleRecord) -> tuple[bool, float, bool, bool, float]:
    return (r.correct, (r.speedup or 0.0) if r.correct else 0.0, r.compiled, r.extracted, r.reward or 0.0)


def better(a: SampleRecord, b: SampleRecord) -> SampleRecord:
    """The better of two turns of one sample: correct first, then faster, compiled, extracted, reward
    (ties keep ``a``, the earlier turn)."""
    return b if _rank(b) > _rank(a) else a


def select_turn(episodes: Sequence[Sequence[SampleRecord]], turn: int,
                mode: Literal["last", "best"]) -> list[SampleRecord]:
    """One record per episode at ``turn``: the episode's answer at that turn (``last``) or its best
    answer so far (``best``). An episode that stopped earlier keeps its final turn's answer."""
    if turn < 1:
        raise ValueError(f"turn must be >= 1, got {turn}")
    chosen = []
    for turns in episodes:
        if not turns:
            raise ValueError("an episode without turns cannot be scored")
        upto = [t for t in turns if t.turn <= turn] or [turns[0]]
        if mode == "last":
            chosen.append(upto[-1])
        else:
            pick = upto[0]
            for t in upto[1:]:
                pick = better(pick, t)
            chosen.append(pick)
    return chosen
