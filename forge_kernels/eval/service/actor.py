"""``EvalWorker``: the eval scheduler as a runtime actor, for eval workers spread over hosts.

::

    svc = await spawn(EvalWorker, {"device": "cpu"}, backend="monarch", replicas=4)
    result = await svc.evaluate.one(task, code, EvalOptions())        # least-loaded replica
    ...
    await svc.close.all()                                             # stop the zygotes
    await svc.stop()

Each actor runs the same :class:`Scheduler` as an eval server (cache, idempotent ids, deadlines,
worker restarts) over one device: ``cpu``, or GPU ``device_index`` (default: the actor's rank
modulo the visible GPUs, so a mesh of ``procs = GPUs per host`` covers a host). The runtime's
Service adds health checks, restarts and fail-over across replicas.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Literal

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.eval.service.models import ServerConfig, builtin_tasks, new_request_id
from forge_kernels.eval.service.scheduler import Scheduler
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.tasks.task import Task

__all__ = ["EvalWorker"]


class EvalWorker(Actor):
    """Evaluates candidate kernels on one device of the host it runs on."""

    class Config(StrictModel):
        device: Literal["cpu", "cuda"] = "cpu"
        device_index: int | None = Field(None, ge=0, description="GPU index (default: rank % visible GPUs)")
        cpu_workers: int = Field(1, ge=1, description="device workers when device='cpu'")
        concurrency: int | None = Field(None, ge=1, description="evaluations at once per device worker")
        cache_entries: int = Field(4096, ge=0)
        eval_deadline_s: float | None = Field(None, gt=0)
        max_attempts: int = Field(2, ge=1)
        timing_lock_dir: str | None = None

    async def setup(self) -> None:
        cfg = self.config
        assert isinstance(cfg, EvalWorker.Config)
        if cfg.device == "cpu":
            devices: Any = "cpu"
        else:
            import torch

            visible = torch.cuda.device_count()  # NVML-based count; does not initialise CUDA here
            if visible == 0:
                raise RuntimeError(f"{self.name}: device='cuda' but no GPU is visible on this host")
            devices = [cfg.device_index if cfg.device_index is not None else self.rank % visible]
        self.scheduler = Scheduler(ServerConfig(
            devices=devices, cpu_workers=cfg.cpu_workers, concurrency=cfg.concurrency,
            cache_entries=cfg.cache_entries, eval_deadline_s=cfg.eval_deadline_s, max_attempts=cfg.max_attempts,
            timing_lock_dir=cfg.timing_lock_dir, queue_limit=1 << 30,
        ))
        await self.scheduler.start(wait=True)

    def _task(self, task: Task | str) -> Task:
        if isinstance(task, Task):
            return task
        known = builtin_tasks()
        if task not in known:
            raise ValueError(f"unknown built-in task {task!r}; known: {sorted(known)}")
        return known[task]

    @endpoint
    async def evaluate(self, task: Task | str, code: str, options: EvalOptions | None = None,
                       request_id: str | None = None) -> EvalResult:
        """Evaluate ``code`` on ``task``; a repeated ``request_id`` returns the first answer."""
        answer = self.scheduler.submit(request_id or new_request_id(), self._task(task), code,
                                       options or EvalOptions())
        return (await answer).result

    @endpoint
    async def evaluate_batch(self, task: Task | str, codes: list[str],
                             options: EvalOptions | None = None) -> list[EvalResult]:
        """Evaluate several candidates of one task (identical ones once); results in order."""
        resolved = self._task(task)
        answers = [self.scheduler.submit(new_request_id(), resolved, c, options or EvalOptions()) for c in codes]
        return [r.result for r in await asyncio.gather(*answers)]

    @endpoint
    async def status(self) -> dict[str, Any]:
        """Health, per-worker state and counters, and the actor's process id."""
        return {"health": self.scheduler.health().model_dump(),
                "workers": [w.model_dump() for w in self.scheduler.worker_infos()], "pid": os.getpid()}

    @endpoint
    async def close(self) -> None:
        """Stop the device workers and their zygotes (call before stopping the mesh or service)."""
        await self.scheduler.stop()
