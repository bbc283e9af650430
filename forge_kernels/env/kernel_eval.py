"""How kernel environments evaluate candidates: the ``eval`` section and the scorer it builds.

A *scorer* is anything with ``async evaluate(task, code, options) -> EvalResult``:

* ``eval: {mode: embedded}`` — an in-process :class:`~forge_kernels.eval.Evaluator` (its warm
  zygote forks one isolated child per candidate);
* ``eval: {mode: service, urls: [...]}`` — the eval service's HTTP client; with no ``urls`` a
  local eval server is started for the environment's lifetime.

Shared by the kernel environments (Triton, CUDA); a non-kernel environment does not need it.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Literal, Protocol

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.eval import EvalOptions, EvalResult, Evaluator
from forge_kernels.tasks import Task

__all__ = ["EmbeddedEvalConfig", "EvalConfig", "Scorer", "ServiceEvalConfig", "build_scorer"]


class Scorer(Protocol):
    """What a kernel environment evaluates candidates with."""

    async def evaluate(self, task: Task, code: str, options: EvalOptions | None = None) -> EvalResult: ...


class EmbeddedEvalConfig(StrictModel):
    """Evaluate in this process's :class:`Evaluator` (isolated child per candidate)."""

    mode: Literal["embedded"] = "embedded"
    options: EvalOptions = EvalOptions()


class ServiceEvalConfig(StrictModel):
    """Evaluate through the eval service; no ``urls`` starts a local server for this environment."""

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
