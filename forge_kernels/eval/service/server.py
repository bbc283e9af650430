"""The eval server: a FastAPI app over the :class:`Scheduler`, and :func:`serve` to run it under uvicorn.

Endpoints (OpenAPI at ``/openapi.json``, docs at ``/docs``)::

    POST /v1/eval                     EvalRequest  -> EvalResponse
    POST /v1/eval/batch               BatchRequest -> BatchResponse (in order)
    GET  /v1/health                   HealthResponse (never needs the token)
    GET  /v1/workers                  [WorkerInfo]
    POST /v1/workers/{id}/restart     202 + WorkerInfo
    GET  /metrics                     Prometheus text format

Rejections carry an :class:`ErrorResponse`: 401 bad token, 404 unknown worker, 409 request id
reused for another payload, 413 code, batch or body too large, 422 a bad field (named), 429 queue
full (with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from forge_kernels.eval.service.errors import InvalidRequest, ServiceRejection, TooLarge
from forge_kernels.eval.service.models import (
    BatchRequest,
    BatchResponse,
    ErrorResponse,
    EvalRequest,
    EvalResponse,
    HealthResponse,
    ServerConfig,
    WorkerInfo,
    builtin_tasks,
)
from forge_kernels.eval.service.scheduler import Scheduler
from forge_kernels.tasks.task import Task

__all__ = ["check_bind_allowed", "create_app", "serve"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text} for code, text in (
        (401, "missing or wrong bearer token"), (409, "request_id reused for a different payload"),
        (413, "code, batch or body over the server's limits"), (422, "a field has a bad value (named)"),
        (429, "queue full; see Retry-After"))
}
_OPEN_PATHS = frozenset({"/v1/health"})


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]
    return ".".join(parts) or "body"


def create_app(config: ServerConfig) -> FastAPI:
    """The app for ``config``; the scheduler starts and stops with the app's lifespan."""
    scheduler = Scheduler(config)
    metrics = scheduler.metrics

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await scheduler.start()
        watchdog = asyncio.ensure_future(_watch_parent(config.parent_pid)) if config.parent_pid else None
        try:
            yield
        finally:
            if watchdog is not None:
                watchdog.cancel()
            await scheduler.stop()

    app = FastAPI(title="Forge Kernels eval service", version="1.0",
                  description="Isolated evaluation of candidate Triton kernels against KernelBench-style tasks.",
                  lifespan=lifespan)
    app.state.scheduler = scheduler
    max_body = config.max_code_bytes * config.max_batch + (1 << 20) * config.max_batch

    def reject(status: int, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> JSONResponse:
        metrics.http_errors.inc(status=str(status))
        return JSONResponse(ErrorResponse(error=message, detail=detail).model_dump(mode="json"), status_code=status,
                            headers=headers)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        if config.token and request.url.path not in _OPEN_PATHS:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {config.token}".encode()):
                return reject(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')")
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body:
            return reject(413, f"request body is {int(length)} bytes; this server accepts at most {max_body}")
        return await call_next(request)

    @app.exception_handler(ServiceRejection)
    async def on_rejection(request: Request, err: ServiceRejection) -> JSONResponse:
        return reject(err.status, err.message, err.detail, err.headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = []
        for e in err.errors():
            if e.get("type") == "json_invalid":
                problems.append(f"request body is not valid JSON ({e.get('ctx', {}).get('error', e.get('msg'))})")
            else:
                problems.append(f"{_field_path(e.get('loc', ()))}: {e.get('msg')}")
        detail = [{"field": _field_path(e.get("loc", ())), "message": e.get("msg"), "type": e.get("type")}
                  for e in err.errors()]
        return reject(422, "invalid request: " + "; ".join(problems[:10]), detail)

    def resolve(request: EvalRequest, where: str) -> Task:
        if len(request.code.encode()) > config.max_code_bytes:
            raise TooLarge(f"{where}code is {len(request.code.encode())} bytes; this server accepts at most "
                           f"{config.max_code_bytes} (max_code_bytes)")
        if isinstance(request.task, Task):
            return request.task
        task = builtin_tasks().get(request.task)
        if task is None:
            raise InvalidRequest(f"{where}task: unknown built-in task {request.task!r}; send a Task object or one "
                                 f"of {sorted(builtin_tasks())}")
        return task

    def admit(items: list[EvalRequest], batch: bool) -> list[asyncio.Task[EvalResponse]]:
        """Validate every item, check the queue has room for the new work, then submit it all."""
        prefix = [f"items.{i}." if batch else "" for i in range(len(items))]
        tasks = [resolve(r, prefix[i]) for i, r in enumerate(items)]
        for i, r in enumerate(items):
            scheduler.normalize(r.options, f"{prefix[i]}options")
        new = sum(1 for r in items if r.request_id not in scheduler.requests)
        if new:
            scheduler.check_capacity(new)
        return [scheduler.submit(r.request_id, t, r.code, r.options) for r, t in zip(items, tasks)]

    @app.post("/v1/eval", response_model=EvalResponse, responses=_ERRORS)
    async def evaluate(request: EvalRequest) -> EvalResponse:
        """Evaluate one candidate; answers when the evaluation is done."""
        (answer,) = admit([request], batch=False)
        return await asyncio.shield(answer)

    @app.post("/v1/eval/batch", response_model=BatchResponse, responses=_ERRORS)
    async def evaluate_batch(batch: BatchRequest) -> BatchResponse:
        """Evaluate several candidates; answers (in order) when all are done."""
        if len(batch.items) > config.max_batch:
            raise TooLarge(f"batch has {len(batch.items)} items; this server accepts at most {config.max_batch} "
                           f"(max_batch)")
        ids = [r.request_id for r in batch.items]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InvalidRequest(f"items: request_id {dup!r} appears more than once in the batch")
        answers = admit(batch.items, batch=True)
        return BatchResponse(results=list(await asyncio.shield(asyncio.gather(*answers))))

    @app.get("/v1/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        """Service status: ok (all workers ready), degraded, starting or down."""
        return scheduler.health()

    @app.get("/v1/workers", response_model=list[WorkerInfo])
    async def workers() -> list[WorkerInfo]:
        """Per worker: state, running evaluations, evaluations done, fault counters, restarts."""
        return scheduler.worker_infos()

    @app.post("/v1/workers/{worker_id}/restart", response_model=WorkerInfo, status_code=202,
              responses={404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}})
    async def restart(worker_id: str) -> Any:
        """Restart a worker (new evaluator and zygote); its running evaluations are re-queued."""
        worker = scheduler.worker(worker_id)
        if worker is None:
            return reject(404, f"no worker {worker_id!r}; workers are {[w.id for w in scheduler.workers]}")
        if scheduler.begin_restart(worker, "restart requested through the API") is None:
            return reject(409, f"worker {worker_id!r} is already {worker.state}")
        return worker.info()

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> PlainTextResponse:
        """Prometheus text format: results by fault class, latency histograms, queue depth, workers."""
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


async def _watch_parent(pid: int) -> None:
    """Stop the server (as on SIGTERM) once process ``pid`` is gone."""
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        await asyncio.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)


def check_bind_allowed(config: ServerConfig) -> None:
    """Refuse a non-loopback host without a token unless explicitly allowed."""
    if config.host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(config.host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not config.token and not config.allow_remote_without_token:
        raise ValueError(f"host {config.host!r} is not a loopback address: set a token (--token) or pass "
                         f"--allow-remote-without-token to serve without authentication")


def serve(config: ServerConfig, ready_file: str | None = None) -> None:
    """Bind, print ``{"event": "listening", "url": ...}`` (and write the url to ``ready_file``), serve
    until SIGTERM/SIGINT."""
    check_bind_allowed(config)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    port = sock.getsockname()[1]
    host = f"[{config.host}]" if family == socket.AF_INET6 else config.host
    url = f"http://{host}:{port}"
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=5, timeout_keep_alive=30))
    print(json.dumps({"event": "listening", "url": url, "devices": config.devices}), flush=True)
    if ready_file:
        tmp = Path(ready_file + ".tmp")
        tmp.write_text(url)
        tmp.replace(ready_file)
    asyncio.run(server.serve(sockets=[sock]))
