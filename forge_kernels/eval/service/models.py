"""Request, response and settings models of the eval service (the HTTP API's pydantic schema)."""

from __future__ import annotations

import functools
import uuid
from typing import Any, Literal

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.tasks.loaders import load_builtin_tasks
from forge_kernels.tasks.task import Task

__all__ = [
    "BatchRequest",
    "BatchResponse",
    "ErrorResponse",
    "EvalRequest",
    "EvalResponse",
    "HealthResponse",
    "ServerConfig",
    "WorkerInfo",
    "WorkerState",
    "builtin_tasks",
    "new_request_id",
]

WorkerState = Literal["starting", "ready", "restarting", "failed", "stopped"]


@functools.lru_cache(maxsize=1)
def builtin_tasks() -> dict[str, Task]:
    """The built-in tasks by name (loaded once); a request may name one instead of sending it."""
    return {t.name: t for t in load_builtin_tasks()}


def new_request_id() -> str:
    """A fresh random request id."""
    return uuid.uuid4().hex


class EvalRequest(StrictModel):
    """One evaluation: a task (a built-in task's name, or a full :class:`Task`), code, options.

    A request that is retried with the same ``request_id`` gets the first answer again instead of
    a second evaluation; reusing an id for a different payload is a 409 conflict.
    """

    request_id: str = Field(default_factory=new_request_id, min_length=1, max_length=128,
                            pattern=r"^[A-Za-z0-9._:-]+$", description="idempotency key (client-chosen)")
    task: str | Task = Field(description="built-in task name such as 'level1/relu', or a Task object")
    code: str = Field(description="candidate module source defining ModelNew")
    options: EvalOptions = Field(default_factory=EvalOptions)


class EvalResponse(StrictModel):
    """The answer to one :class:`EvalRequest`."""

    request_id: str
    result: EvalResult
    cached: bool = Field(description="answered from the result cache or an identical evaluation in flight")
    worker: str | None = Field(default=None, description="the worker that evaluated it (None when cached)")
    queued_s: float = Field(description="time from arrival to the start of the evaluation")
    latency_s: float = Field(description="time from arrival to the answer")


class BatchRequest(StrictModel):
    """Several evaluations in one call; answered in order, once all are done."""

    items: list[EvalRequest] = Field(min_length=1)


class BatchResponse(StrictModel):
    results: list[EvalResponse]


class WorkerInfo(StrictModel):
    """State and counters of one device worker."""

    id: str
    device: str = Field(description="'cpu' or 'cuda:<index>'")
    state: WorkerState
    in_flight: int = Field(description="evaluations running on this worker now")
    capacity: int = Field(description="evaluations it runs at once")
    evaluations: int = Field(description="evaluations finished (results delivered)")
    faults: dict[str, int] = Field(description="finished evaluations by fault class")
    restarts: int = Field(description="times the worker was restarted (new evaluator and zygote)")
    zygote_restarts: int = Field(description="times the evaluator replaced a dead zygote by itself")
    zygote_pid: int | None = None
    last_error: str | None = None


class HealthResponse(StrictModel):
    status: Literal["ok", "degraded", "starting", "down"]
    device_kind: Literal["cpu", "cuda"]
    workers: int
    workers_ready: int
    queue_depth: int
    in_flight: int


class ErrorResponse(StrictModel):
    """Body of every 4xx/5xx answer: a sentence naming the problem, plus structured detail."""

    error: str
    detail: Any = None


class ServerConfig(StrictModel):
    """Settings of one eval server (the ``eval-server`` command's flags)."""

    host: str = "127.0.0.1"
    port: int = Field(8700, ge=0, le=65535, description="0 picks a free port")
    devices: Literal["cpu"] | list[int] = Field("cpu", description="'cpu' or GPU indices, one worker each")
    cpu_workers: int = Field(1, ge=1, le=64, description="workers when devices='cpu' (each has a zygote)")
    concurrency: int | None = Field(None, ge=1, le=64,
                                    description="evaluations one worker runs at once (default 2 cpu, 4 gpu)")
    queue_limit: int = Field(1024, ge=1, description="waiting evaluations before 429")
    max_code_bytes: int = Field(256_000, ge=1, description="candidate source size limit (413 beyond)")
    max_batch: int = Field(256, ge=1, description="items per batch request (413 beyond)")
    cache_entries: int = Field(4096, ge=0, description="results kept by (task, code, options) hash")
    request_ids: int = Field(100_000, ge=1, description="request ids remembered for idempotent retries")
    eval_deadline_s: float | None = Field(
        None, gt=0, description="service-side limit per evaluation (default options.timeout_s + 240); "
                                "a worker that overruns it is restarted and the evaluation moves on")
    max_attempts: int = Field(2, ge=1, description="workers one evaluation may be tried on")
    token: str | None = Field(None, min_length=8, description="bearer token required on every call but health")
    allow_remote_without_token: bool = Field(False, description="permit a non-loopback host with no token")
    timing_lock_dir: str | None = Field(None, description="where per-GPU timing lock files live (default: tmp)")
    parent_pid: int | None = Field(None, description="exit when this process is gone (LocalEvalServer)")

    @field_validator("devices", mode="before")
    @classmethod
    def _parse_devices(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "cpu":
            try:
                value = [int(v) for v in value.split(",") if v.strip()]
            except ValueError:
                raise ValueError(f"devices must be 'cpu' or comma-separated GPU indices like '0,1', "
                                 f"got {value!r}") from None
        if isinstance(value, list):
            if not value or len(set(value)) != len(value) or min(value) < 0:
                raise ValueError(f"devices must be distinct non-negative GPU indices, got {value!r}")
        return value

    @property
    def device_kind(self) -> Literal["cpu", "cuda"]:
        return "cpu" if self.devices == "cpu" else "cuda"

    @property
    def worker_concurrency(self) -> int:
        return self.concurrency or (2 if self.devices == "cpu" else 4)
