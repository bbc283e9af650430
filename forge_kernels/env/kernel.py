"""What every kernel environment shares: KernelBench-format tasks, a candidate ``ModelNew`` module
extracted from the reply, scored by the isolated evaluator. The languages are thin subclasses:
:class:`~forge_kernels.env.triton.TritonKernelEnv` (``name: triton``) and
:class:`~forge_kernels.env.cuda.CudaKernelEnv` (``name: cuda``).

``parse_action`` extracts the ``ModelNew`` module (:func:`extract_code`); ``score`` evaluates it,
applies the reward function and writes the feedback; ``Outcome.info`` holds the evaluation's facts
(extracted, compiled, correct, fault, timing_available, speedup, speedup_vs_compile,
profiling_ratio, eval_s, device) and ``Outcome.metrics`` the scalars the loops log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.env.base import Action, Environment, Outcome
from forge_kernels.env.extraction import extract_code
from forge_kernels.env.feedback import format_feedback
from forge_kernels.env.kernel_eval import EmbeddedEvalConfig, EvalConfig, Scorer, build_scorer
from forge_kernels.env.prompts import ChatMessage, PromptConfig, task_messages
from forge_kernels.env.rewards import RewardConfig, compute_reward
from forge_kernels.eval import EvalResult
from forge_kernels.eval.results import is_fast
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.tasks import Task, TaskSourceConfig, load_tasks
from forge_kernels.tasks.loaders import BuiltinTasksConfig

__all__ = ["SuccessConfig", "TritonKernelEnv", "kernel_info"]


class SuccessConfig(StrictModel):
    """When a kernel counts as solved (the multi-turn early-stop condition)."""

    min_speedup: float | None = Field(
        default=None, gt=0,
        description="also require a measured speedup >= this (null: correct is enough; "
                    "no timing, e.g. on CPU, never reaches a threshold)")

    def reached(self, result: EvalResult) -> bool:
        if not result.correct:
            return False
        if self.min_speedup is None:
            return True
        return bool(result.timing_available and result.speedup is not None and result.speedup >= self.min_speedup)


FAST_P = (1.0, 1.5)  # the fast_p thresholds logged as metrics when the evaluator times


def kernel_metrics(result: EvalResult | None, extracted: bool) -> dict[str, float]:
    """The scalars logged per turn (``reward/<key>``, ``turn/<k>/<key>``): extracted, compiled,
    correct, and ``fast_<p>`` (:func:`~forge_kernels.eval.results.is_fast`) when it was timed."""
    r = result
    metrics = {"extracted": float(extracted), "compiled": float(bool(r and r.compiled)),
               "correct": float(bool(r and r.correct))}
    if r is not None and r.timing_available:
        metrics.update({f"fast_{p:g}": float(is_fast(r.correct, r.speedup, p)) for p in FAST_P})
    return metrics


def kernel_info(result: EvalResult | None, extracted: bool) -> dict[str, Any]:
    """Small, picklable facts of one evaluation for ``Turn.info``."""
    r = result
    return {
        "extracted": extracted,
        "compiled": bool(r and r.compiled),
        "correct": bool(r and r.correct),
        "fault": None if r is None else r.fault.value,
        "timing_available": bool(r and r.timing_available),
        "speedup": None if r is None else r.speedup,
        "speedup_vs_compile": None if r is None else r.speedup_vs_compile,
        "profiling_ratio": None if r is None else r.profiling_ratio,  # read by PRS (buffer.prs)
        "eval_s": 0.0 if r is None else r.wall_time_s,
        "device": None if r is None else r.device,
    }


class KernelEnv(Environment[Task]):
    """Write ``ModelNew`` with kernels for a KernelBench-format reference module (not registered:
    a language subclass sets ``kernel_language``, its prompt and its evaluation language).

    ``kernel_language`` names the language in feedback, ``kernel_facts`` adds facts to ``Outcome.info``.
    """

    kernel_language: ClassVar[str] = ""

    class Config(StrictModel):
        tasks: TaskSourceConfig = BuiltinTasksConfig()
        prompt: PromptConfig = PromptConfig()
        eval: EvalConfig = EmbeddedEvalConfig()
        reward_fn: RewardConfig = Field(default_factory=RewardConfig, description="the reward function of an evaluation (the reward actor's own settings are the top-level 'reward' section)")
        no_code_reward: float = Field(default=0.0, description="reward when no ModelNew module is found")
        feedback_chars: int = Field(default=2000, ge=100, description="feedback text is trimmed to this")
        success: SuccessConfig = SuccessConfig()

    config: Config

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        self._stack: contextlib.AsyncExitStack | None = None
        self._scorer: Scorer | None = None

    async def setup(self) -> None:
        """Start the evaluator (embedded) or connect to / start the eval service."""
        self._stack = contextlib.AsyncExitStack()
        self._scorer = await build_scorer(self.config.eval, self._stack)

    async def close(self) -> None:
        if self._stack is not None:
            stack, self._stack, self._scorer = self._stack, None, None
            await stack.aclose()

    def load_tasks(self) -> Sequence[Task]:
        return load_tasks(self.config.tasks)

    def initial_messages(self, task: Task) -> list[ChatMessage]:
        return task_messages(task, self.config.prompt)

    def parse_action(self, task: Task, text: str) -> Action:
        extraction = extract_code(text)
        if not extraction.ok:
            return Action(False, None, extraction.message, extraction.failure.value)
        return Action(True, extraction.code)

    def invalid_action_outcome(self, task: Task, action: Action) -> Outcome:
        info = {**kernel_info(None, extracted=False), "parse_failure": action.failure}
        return Outcome(self.config.no_code_reward, False, action.message, info, kernel_metrics(None, extracted=False))

    async def score(self, task: Task, action: Action) -> Outcome:
        if self._scorer is None:
            raise RuntimeError(f"{type(self).__name__}.score before setup(): the evaluator is not started")
        result = await self._scorer.evaluate(task, action.content, self.config.eval.options)
        record_metric(f"eval/fault/{result.fault.value}", 1, Reduce.SUM)
        record_metric("eval/wall_s", result.wall_time_s)
        return Outcome(reward=compute_reward(result, self.config.reward_fn),
                       success=self.config.success.reached(result),
                       feedback=format_feedback(result, self.config.feedback_chars, self.kernel_language),
                       info=self.kernel_facts(result), metrics=kernel_metrics(result, extracted=True))

    def kernel_facts(self, result: EvalResult) -> dict[str, Any]:
        """``Outcome.info`` of an evaluated candidate: small picklable facts for turns and metrics."""
        return kernel_info(result, extracted=True)
