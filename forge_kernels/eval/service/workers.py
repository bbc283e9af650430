"""One device worker: an :class:`~forge_kernels.eval.Evaluator` bound to one device, its threads,
state and counters, and the restart that replaces all of them.

The worker runs up to ``capacity`` evaluations at once (compilation and correctness overlap);
on a GPU every child holds the device's timing lock while it times, so timing is serialised.
A restart abandons the old evaluator (its zygote is stopped, its threads finish on their own and
their answers are dropped) and warms a new one; the scheduler re-queues the abandoned work.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter as Tally
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from forge_kernels.eval.evaluator import Evaluator
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.eval.service.models import WorkerInfo, WorkerState
from forge_kernels.eval.zygote import ZygoteClient
from forge_kernels.tasks.task import Task

__all__ = ["DeviceWorker", "timing_lock_path"]

_WARM_RETRY_S = (2.0, 5.0, 10.0, 30.0, 60.0)


def timing_lock_path(device_index: int, lock_dir: str | None = None) -> str:
    """The lock file every evaluator timing on GPU ``device_index`` of this host shares."""
    directory = Path(lock_dir or tempfile.gettempdir())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"forge-kernels-timing-cuda{device_index}.lock"
    path.touch(exist_ok=True)
    return str(path)


class DeviceWorker:
    """Evaluations on one device (``cpu``, or GPU ``device_index``)."""

    def __init__(self, worker_id: str, device_kind: Literal["cpu", "cuda"], device_index: int, capacity: int,
                 timing_lock_dir: str | None = None) -> None:
        self.id = worker_id
        self.device_kind = device_kind
        self.device_index = device_index
        self.capacity = capacity
        self.timing_lock = timing_lock_path(device_index, timing_lock_dir) if device_kind == "cuda" else None
        self.state: WorkerState = "starting"
        self.generation = 0
        self.in_flight = 0
        self.evaluations = 0
        self.faults: Tally[str] = Tally()
        self.restarts = 0
        self.past_zygote_restarts = 0  # of evaluators this worker has abandoned
        self.last_error: str | None = None
        self.evaluator: Evaluator | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.zygote: ZygoteClient | None = None
        self._stopping = False

    @property
    def device(self) -> str:
        return "cpu" if self.device_kind == "cpu" else f"cuda:{self.device_index}"

    def options_for(self, options: EvalOptions) -> EvalOptions:
        """``options`` pinned to this worker's device."""
        return options.model_copy(update={"device": self.device_kind, "device_index": self.device_index})

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Build a fresh evaluator and warm its zygote, retrying with backoff until it comes up
        (or the worker is stopped). The state is ``ready`` on return unless stopped."""
        attempt = 0
        while not self._stopping:
            self.generation += 1
            self.evaluator = Evaluator(timing_lock=self.timing_lock)
            self.executor = ThreadPoolExecutor(self.capacity, thread_name_prefix=f"eval-{self.id}")
            try:
                self.zygote = await asyncio.get_running_loop().run_in_executor(
                    self.executor, self.evaluator.zygote, self.device_kind)
            except Exception as err:  # the zygote would not start: wait and try again
                self.state = "failed"
                self.last_error = f"zygote did not start: {type(err).__name__}: {err}"
                await self._abandon()
                await asyncio.sleep(_WARM_RETRY_S[min(attempt, len(_WARM_RETRY_S) - 1)])
                attempt += 1
                continue
            self.state = "ready"
            return

    async def restart(self, reason: str) -> None:
        """Abandon the current evaluator (the caller has taken its work back) and start a new one."""
        self.state = "restarting"
        self.restarts += 1
        self.last_error = reason
        await self._abandon()
        await self.start()

    async def stop(self) -> None:
        self._stopping = True
        self.state = "stopped"
        await self._abandon()

    async def _abandon(self) -> None:
        evaluator, executor = self.evaluator, self.executor
        if self.zygote is not None:
            self.past_zygote_restarts += max(0, self.zygote.generation - 1)
        self.evaluator, self.executor, self.zygote = None, None, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if evaluator is not None:  # close() may wait for a stuck zygote: not on the event loop
            await asyncio.to_thread(evaluator.close)

    # -- work ----------------------------------------------------------------------------------------
    async def evaluate(self, task: Task, code: str, options: EvalOptions) -> EvalResult:
        """Evaluate on this worker's current evaluator (raises RuntimeError when it is not ready)."""
        evaluator, executor = self.evaluator, self.executor
        if self.state != "ready" or evaluator is None or executor is None:
            raise RuntimeError(f"worker {self.id} is {self.state}")
        return await asyncio.get_running_loop().run_in_executor(
            executor, evaluator.evaluate, task, code, self.options_for(options))

    def record(self, result: EvalResult) -> None:
        self.evaluations += 1
        self.faults[result.fault.value] += 1

    def info(self) -> WorkerInfo:
        zygote = self.zygote
        return WorkerInfo(
            id=self.id, device=self.device, state=self.state, in_flight=self.in_flight, capacity=self.capacity,
            evaluations=self.evaluations, faults=dict(self.faults), restarts=self.restarts,
            zygote_restarts=self.past_zygote_restarts + (max(0, zygote.generation - 1) if zygote else 0),
            zygote_pid=zygote.pid if zygote is not None and zygote.alive() else None,
            last_error=self.last_error,
        )
