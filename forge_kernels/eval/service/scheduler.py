"""The scheduler: one queue in front of the device workers, the result cache, idempotent request
ids, per-evaluation deadlines and worker restarts.

Workers pull from one shared queue (``capacity`` slots each), so a busy or restarting worker never
holds work a healthy one could run: "its queued work moves to healthy workers" is the queue's
nature. An ``internal_error`` result (an evaluator fault, never the candidate's) is tried once
more before it is returned. When a worker misbehaves (its zygote dies under an evaluation twice, or an evaluation
overruns the service deadline) the worker is restarted and the evaluations it was running go back
to the front of the queue, up to ``max_attempts`` tries each. Every accepted request gets exactly
one :class:`EvalResponse`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from forge_kernels.eval.deadlines import eval_deadlines
from forge_kernels.eval.faults import FaultClass
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.eval.service.errors import InvalidRequest, QueueFull, RequestConflict
from forge_kernels.eval.service.metrics import ServiceMetrics
from forge_kernels.eval.service.models import EvalResponse, HealthResponse, ServerConfig, WorkerInfo
from forge_kernels.eval.service.workers import DeviceWorker
from forge_kernels.tasks.task import Task

__all__ = ["Scheduler", "cache_key"]



def cache_key(task: Task, code: str, options: EvalOptions) -> str:
    """Hash of everything that decides a result."""
    blob = json.dumps({"task": task.model_dump(mode="json"), "code": code,
                       "options": options.model_dump(mode="json")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(eq=False)
class WorkItem:
    """One distinct evaluation; identical requests share it."""

    key: str
    task: Task
    code: str
    options: EvalOptions
    future: asyncio.Future[EvalResult]
    enqueued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    attempts: int = 0
    worker: str | None = None
    failures: list[str] = field(default_factory=list)


class _WorkQueue:
    """FIFO with a front door for work taken back from a restarted worker. ``put`` never awaits,
    so no cancellation can fall between taking an item back and queueing it again."""

    def __init__(self) -> None:
        self._items: deque[WorkItem] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: WorkItem, front: bool = False) -> None:
        (self._items.appendleft if front else self._items.append)(item)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> WorkItem:
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled: hand the wake-up on
                raise
        return self._items.popleft()


@dataclass
class _RequestEntry:
    key: str
    answer: asyncio.Task[EvalResponse]


class Scheduler:
    """Runs evaluations on the workers of one server. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, config: ServerConfig, metrics: ServiceMetrics | None = None) -> None:
        self.config = config
        self.kind = config.device_kind
        indices = [0] * config.cpu_workers if config.devices == "cpu" else list(config.devices)
        self.workers = [
            DeviceWorker(f"{'cpu' if self.kind == 'cpu' else 'gpu'}{i if self.kind == 'cpu' else idx}", self.kind,
                         idx, config.worker_concurrency, config.timing_lock_dir)
            for i, idx in enumerate(indices)
        ]
        self.queue = _WorkQueue()
        self.pending: dict[str, WorkItem] = {}  # key -> item queued or running
        self.cache: OrderedDict[str, EvalResult] = OrderedDict()
        self.requests: OrderedDict[str, _RequestEntry] = OrderedDict()
        self.metrics = metrics or ServiceMetrics()
        self.metrics.bind(self)
        self._slots: dict[str, list[asyncio.Task[None]]] = {}
        self._restarting: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._eval_seconds = 1.0  # moving average, for Retry-After

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, wait: bool = False) -> None:
        """Warm the workers (in the background unless ``wait``); each takes work once ready."""
        starts = [self._spawn(self._start_worker(w)) for w in self.workers]
        if wait:
            await asyncio.gather(*starts)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        for worker in self.workers:
            for slot in self._slots.pop(worker.id, []):
                slot.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(w.stop() for w in self.workers))
        for item in list(self.pending.values()):
            if not item.future.done():
                item.future.cancel()

    def _spawn(self, coro) -> asyncio.Task[None]:  # type: ignore[no-untyped-def]
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _start_worker(self, worker: DeviceWorker) -> None:
        await worker.start()
        self._slots[worker.id] = [asyncio.ensure_future(self._slot(worker, worker.generation))
                                  for _ in range(worker.capacity)]

    def begin_restart(self, worker: DeviceWorker, reason: str) -> asyncio.Task[None] | None:
        """Restart ``worker`` in the background: it stops taking work now, its running evaluations
        go back to the queue. None when it is already restarting (or stopped)."""
        if worker.id in self._restarting or worker.state == "stopped":
            return None
        self._restarting.add(worker.id)
        worker.state = "restarting"
        return self._spawn(self._restart(worker, reason))

    async def _restart(self, worker: DeviceWorker, reason: str) -> None:
        try:
            slots = self._slots.pop(worker.id, [])
            for slot in slots:
                slot.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            await worker.restart(reason)
        finally:
            self._restarting.discard(worker.id)
        if worker.state == "ready":
            self._slots[worker.id] = [asyncio.ensure_future(self._slot(worker, worker.generation))
                                      for _ in range(worker.capacity)]

    def worker(self, worker_id: str) -> DeviceWorker | None:
        return next((w for w in self.workers if w.id == worker_id), None)

    # -- the worker side ---------------------------------------------------------------------------
    def _accepting(self, worker: DeviceWorker, generation: int) -> bool:
        return worker.generation == generation and worker.state == "ready" and worker.id not in self._restarting

    async def _slot(self, worker: DeviceWorker, generation: int) -> None:
        while self._accepting(worker, generation):
            item = await self.queue.get()
            if item.future.done():  # cancelled by stop()
                continue
            if not self._accepting(worker, generation):
                self.queue.put(item, front=True)
                return
            if not await self._run(worker, item):
                return

    async def _run(self, worker: DeviceWorker, item: WorkItem) -> bool:
        """Evaluate ``item`` on ``worker``; False when the worker must be restarted."""
        item.attempts += 1
        item.started_at = item.started_at or time.monotonic()
        item.worker = worker.id
        deadline = eval_deadlines(item.options, self.config.eval_deadline_s).service_s
        worker.in_flight += 1
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(worker.evaluate(item.task, item.code, item.options), deadline)
        except asyncio.CancelledError:  # the worker is being restarted: the item was not its fault
            item.attempts -= 1
            self.metrics.retries.inc(reason="worker_restart")
            self.queue.put(item, front=True)
            raise
        except asyncio.TimeoutError:
            problem = f"evaluation exceeded the service deadline of {deadline:g} s on worker {worker.id}"
            self._misbehaved(worker, item, problem, "deadline")
            return False
        except Exception as err:  # the evaluator is gone (abandoned in a restart we did not start)
            self._misbehaved(worker, item, f"worker {worker.id} failed: {type(err).__name__}: {err}",
                                   "worker_failed")
            return False
        finally:
            worker.in_flight -= 1
        if result.fault is FaultClass.INTERNAL_ERROR:
            if "ZygoteDied" in (result.error or ""):
                self._misbehaved(worker, item, f"zygote of worker {worker.id} kept dying: {result.error}",
                                       "zygote_died")
                return False
            if item.attempts < self.config.max_attempts:  # an evaluator error may be transient: once more
                item.failures.append(f"worker {worker.id}: {result.error}")
                self.metrics.retries.inc(reason="internal_error")
                self.queue.put(item, front=True)
                return True
        elapsed = time.monotonic() - started
        self._eval_seconds = 0.9 * self._eval_seconds + 0.1 * elapsed
        worker.record(result)
        self.metrics.evaluated(result, elapsed, item.started_at - item.enqueued_at)
        self._finish(item, result)
        return True

    def _misbehaved(self, worker: DeviceWorker, item: WorkItem, problem: str, reason: str) -> None:
        """Give ``item`` another worker (or its final answer) and restart ``worker`` in the background."""
        item.failures.append(problem)
        self.begin_restart(worker, problem)  # first: the worker stops taking work before the item returns
        if item.attempts >= self.config.max_attempts:
            result = EvalResult(task=item.task.name, device=worker.device, compiled=False, correct=False,
                                fault=FaultClass.INTERNAL_ERROR,
                                error=f"evaluation abandoned after {item.attempts} attempts: "
                                      + "; ".join(item.failures))
            self.metrics.evaluated(result, 0.0, (item.started_at or item.enqueued_at) - item.enqueued_at)
            self._finish(item, result)
        else:
            self.metrics.retries.inc(reason=reason)
            self.queue.put(item, front=True)

    def _finish(self, item: WorkItem, result: EvalResult) -> None:
        self.pending.pop(item.key, None)
        if result.fault is not FaultClass.INTERNAL_ERROR and self.config.cache_entries:
            self.cache[item.key] = result
            while len(self.cache) > self.config.cache_entries:
                self.cache.popitem(last=False)
        if not item.future.done():
            item.future.set_result(result)

    # -- the request side --------------------------------------------------------------------------
    def normalize(self, options: EvalOptions, field_name: str = "options") -> EvalOptions:
        """Pin ``options`` to this server's device kind (device_index is the worker's business)."""
        if options.device not in ("auto", self.kind):
            raise InvalidRequest(f"{field_name}.device={options.device!r} but this server evaluates on "
                                 f"{self.kind!r}; send 'auto' or {self.kind!r}")
        return options.model_copy(update={"device": self.kind, "device_index": 0})

    def check_capacity(self, new_items: int) -> None:
        """Raise :class:`QueueFull` when ``new_items`` more would overflow the queue."""
        if len(self.queue) + new_items > self.config.queue_limit:
            slots = max(1, sum(w.capacity for w in self.workers if w.state == "ready"))
            retry = max(1, min(60, math.ceil(len(self.queue) * self._eval_seconds / slots)))
            self.metrics.requests.inc(outcome="rejected_queue_full")
            raise QueueFull(f"the evaluation queue is full ({len(self.queue)} waiting, limit "
                            f"{self.config.queue_limit}); retry after {retry} s", retry)

    def submit(self, request_id: str, task: Task, code: str, options: EvalOptions) -> asyncio.Task[EvalResponse]:
        """Accept one evaluation and return the task that answers it. Call :meth:`check_capacity`
        first for new work; a known ``request_id`` returns its first answer."""
        options = self.normalize(options)
        key = cache_key(task, code, options)
        entry = self.requests.get(request_id)
        if entry is not None:
            if entry.key != key:
                raise RequestConflict(f"request_id {request_id!r} was already used for a different "
                                      f"task/code/options; use a new id for a new evaluation")
            self.metrics.requests.inc(outcome="retried_id")
            return entry.answer
        answer = asyncio.ensure_future(self._answer(request_id, key, task, code, options))
        self.requests[request_id] = _RequestEntry(key, answer)
        while len(self.requests) > self.config.request_ids:
            oldest, old = next(iter(self.requests.items()))
            if not old.answer.done():
                break
            del self.requests[oldest]
        return answer

    async def _answer(self, request_id: str, key: str, task: Task, code: str,
                      options: EvalOptions) -> EvalResponse:
        arrival = time.monotonic()
        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            self.metrics.requests.inc(outcome="cache_hit")
            return self._response(request_id, cached, True, None, arrival, arrival)
        item = self.pending.get(key)
        if item is not None:
            self.metrics.requests.inc(outcome="deduplicated")
            result = await asyncio.shield(item.future)
            return self._response(request_id, result, True, None, arrival, arrival)
        item = WorkItem(key, task, code, options, asyncio.get_running_loop().create_future())
        self.pending[key] = item
        self.metrics.requests.inc(outcome="evaluated")
        self.queue.put(item)
        result = await asyncio.shield(item.future)
        return self._response(request_id, result, False, item.worker, arrival, item.started_at or arrival)

    def _response(self, request_id: str, result: EvalResult, cached: bool, worker: str | None, arrival: float,
                  started: float) -> EvalResponse:
        now = time.monotonic()
        self.metrics.latency.observe(now - arrival, cached=str(cached).lower())
        return EvalResponse(request_id=request_id, result=result, cached=cached, worker=worker,
                            queued_s=max(0.0, started - arrival), latency_s=now - arrival)

    # -- views ---------------------------------------------------------------------------------------
    def health(self) -> HealthResponse:
        ready = sum(w.state == "ready" for w in self.workers)
        starting = any(w.state == "starting" for w in self.workers)
        status = "ok" if ready == len(self.workers) else "degraded" if ready else "starting" if starting else "down"
        return HealthResponse(status=status, device_kind=self.kind, workers=len(self.workers), workers_ready=ready,
                              queue_depth=len(self.queue), in_flight=sum(w.in_flight for w in self.workers))

    def worker_infos(self) -> list[WorkerInfo]:
        return [w.info() for w in self.workers]
