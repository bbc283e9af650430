"""The reward actor: extract the candidate module, evaluate it, turn the verdict into a reward.

Evaluation goes through a *scorer*, anything with
``async evaluate(task, code, options) -> EvalResult``:

* ``eval: {mode: embedded}`` — an in-process :class:`~forge_kernels.eval.Evaluator` (its warm
  zygote forks one isolated child per candidate);
* ``eval: {mode: service, urls: [...]}`` — the eval service's HTTP client; with no ``urls`` a
  local eval server is started for the actor's lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.env.extraction import extract_code
from forge_kernels.env.feedback import format_feedback
from forge_kernels.env.rewards import RewardConfig, compute_reward
from forge_kernels.eval import EvalOptions, EvalResult, Evaluator
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.tasks import Task
from forge_kernels.types import Completion

__all__ = ["EmbeddedEvalConfig", "RewardActor", "Scored", "Scorer", "ServiceEvalConfig", "build_scorer"]


class Scorer(Protocol):
    """What the reward actor evaluates candidates with."""

    async def evaluate(self, task: Task, code: str, options: EvalOptions | None = None) -> EvalResult: ...


class EmbeddedEvalConfig(StrictModel):
    """Evaluate in this process's :class:`Evaluator` (isolated child per candidate)."""

    mode: Literal["embedded"] = "embedded"
    options: EvalOptions = EvalOptions()


class ServiceEvalConfig(StrictModel):
    """Evaluate through the eval service; no ``urls`` starts a local server for this actor."""

    mode: Literal["service"]
    urls: list[str] = Field(default_factory=list, description="eval server base URLs")
    token: str | None = Field(default=None, description="bearer token of the servers, if they need one")
    devices: str = Field(default="cpu", description="devices of a locally started server ('cpu' or '0,1')")
    workers: int = Field(default=2, ge=1, description="CPU workers of a locally started server")
    options: EvalOptions = EvalOptions()


EvalConfig = Annotated[EmbeddedEvalConfig | ServiceEvalConfig, Field(discriminator="mode")]


class _EmbeddedScorer:
    def __init__(self, options: EvalOptions) -> None:
        self.evaluator = Evaluator(options)

    async def evaluate(self, task: Task, code: str, options: EvalOptions | None = None) -> EvalResult:
        return await self.evaluator.aevaluate(task, code, options)

    async def close(self) -> None:
        self.evaluator.close()


async def build_scorer(cfg: EmbeddedEvalConfig | ServiceEvalConfig,
                       stack: contextlib.AsyncExitStack) -> Scorer:
    """The scorer for ``cfg``; resources it opens are released when ``stack`` closes."""
    if cfg.mode == "embedded":
        scorer = _EmbeddedScorer(cfg.options)
        stack.push_async_callback(scorer.close)
        return scorer
    # the service client is only needed (and only imported) in service mode
    from forge_kernels.eval.service.client import EvalClient

    urls = list(cfg.urls)
    if not urls:
        from forge_kernels.eval.service.launch import LocalEvalServer

        server = await stack.enter_async_context(
            LocalEvalServer(devices=cfg.devices, port=0, workers=cfg.workers, token=cfg.token))
        urls = [server.url]
    return await stack.enter_async_context(EvalClient(urls, token=cfg.token))


@dataclass
class Scored:
    """The reward of one completion and how it was earned."""

    reward: float | None  # None: the evaluator failed (not the candidate): drop the sample
    extracted: bool
    result: EvalResult | None  # None when no code could be extracted
    feedback: str

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.correct

    @property
    def compiled(self) -> bool:
        return self.result is not None and self.result.compiled

    def summary(self) -> dict[str, Any]:
        """Small, picklable facts for ``Turn.info`` and metrics."""
        r = self.result
        return {
            "extracted": self.extracted,
            "compiled": self.compiled,
            "correct": self.correct,
            "fault": None if r is None else r.fault.value,
            "timing_available": bool(r and r.timing_available),
            "speedup": None if r is None else r.speedup,
            "eval_s": 0.0 if r is None else r.wall_time_s,
        }


class RewardActor(Actor):
    """Scores completions of one task: extraction, evaluation, the configured reward function."""

    class Config(StrictModel):
        eval: EvalConfig = EmbeddedEvalConfig()
        reward: RewardConfig = RewardConfig()
        no_code_reward: float = Field(default=0.0, description="reward when no ModelNew module is found")
        max_concurrency: int = Field(default=2, ge=1, description="evaluations in flight at once")
        feedback_chars: int = Field(default=2000, ge=100)

    async def setup(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self.scorer = await build_scorer(self.config.eval, self._stack)
        self._slots = asyncio.Semaphore(self.config.max_concurrency)

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Scored]:
        """One :class:`Scored` per completion, in order."""
        return list(await asyncio.gather(*(self._score_one(task, c.text) for c in completions)))

    async def _score_one(self, task: Task, text: str) -> Scored:
        extraction = extract_code(text)
        if not extraction.ok:
            record_metric(f"eval/extract_fail/{extraction.failure.value}", 1, Reduce.SUM)
            return Scored(self.config.no_code_reward, False, None, extraction.message)
        async with self._slots:
            result = await self.scorer.evaluate(task, extraction.code, self.config.eval.options)
        reward = compute_reward(result, self.config.reward)
        record_metric(f"eval/fault/{result.fault.value}", 1, Reduce.SUM)
        record_metric("eval/wall_s", result.wall_time_s)
        return Scored(reward, True, result, format_feedback(result, self.config.feedback_chars))

    @endpoint
    async def close(self) -> None:
        """Stop the evaluator (or the local eval server)."""
        await self._stack.aclose()
