"""``EvalClient``: the async client of one or more eval servers.

::

    async with EvalClient(["http://127.0.0.1:8700", "http://10.0.0.2:8700"], token=...) as client:
        result = await client.evaluate(task, code, EvalOptions(trials=3))
        results = await client.evaluate_batch(task, codes)

One pooled ``httpx.AsyncClient``; each call goes to the healthy server with the fewest calls
outstanding. A request keeps its id across retries (connection failures, 5xx and 429, with
exponential backoff and ``Retry-After``), so a server that already has it answers with the first
result instead of evaluating twice. A server that fails a connection is skipped for a cool-down.
When no server answers, :class:`EvalServiceUnavailable` names every url and the last errors; a
request the server rejects as such (4xx) raises :class:`EvalRequestError` at once.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from forge_kernels.eval.deadlines import CLIENT_TIMEOUT_S
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.eval.service.errors import EvalRequestError, EvalServiceUnavailable
from forge_kernels.eval.service.models import EvalResponse, new_request_id
from forge_kernels.tasks.task import Task

__all__ = ["EvalClient", "EvalRequestError", "EvalServiceUnavailable"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass
class _Server:
    url: str
    outstanding: int = 0
    down_until: float = 0.0
    consecutive_failures: int = 0

    def available(self, now: float) -> bool:
        return self.down_until <= now


class EvalClient:
    """Client-side load balancer and retrying caller of eval servers (see the module docstring)."""

    def __init__(self, urls: str | Sequence[str], *, token: str | None = None, timeout_s: float = CLIENT_TIMEOUT_S,
                 connect_timeout_s: float = 5.0, max_retries: int = 5, backoff_s: float = 0.2,
                 max_backoff_s: float = 5.0, down_for_s: float = 2.0, max_connections: int = 64,
                 batch_chunk: int = 64) -> None:
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ValueError("EvalClient needs at least one server url, got none")
        bad = [u for u in url_list if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"server urls must start with http:// or https://, got {bad}")
        if max_retries < 0 or batch_chunk < 1:
            raise ValueError(f"max_retries must be >= 0 and batch_chunk >= 1, got {max_retries}, {batch_chunk}")
        self.urls = [u.rstrip("/") for u in url_list]
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.down_for_s = down_for_s
        self.batch_chunk = batch_chunk
        self._servers = [_Server(u) for u in self.urls]
        self._turn = itertools.count()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    # -- lifecycle ---------------------------------------------------------------------------------
    async def __aenter__(self) -> "EvalClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    # -- evaluation ----------------------------------------------------------------------------------
    async def evaluate(self, task: Task | str, code: str, options: EvalOptions | None = None, *,
                       request_id: str | None = None) -> EvalResult:
        """Evaluate ``code`` on ``task`` (a Task or a built-in task name) on some server."""
        return (await self.evaluate_response(task, code, options, request_id=request_id)).result

    async def evaluate_response(self, task: Task | str, code: str, options: EvalOptions | None = None, *,
                                request_id: str | None = None) -> EvalResponse:
        """:meth:`evaluate` with the server's metadata (cached, worker, latency)."""
        body = self._item(task, code, options, request_id or new_request_id())
        return EvalResponse.model_validate(await self._post("/v1/eval", body))

    async def evaluate_batch(self, tasks: Task | str | Sequence[Task | str], codes: Sequence[str],
                             options: EvalOptions | None = None) -> list[EvalResult]:
        """Evaluate ``codes`` (on one task, or on ``tasks[i]`` each), in chunks spread over the
        servers; results in order."""
        if isinstance(tasks, (Task, str)):
            task_list: list[Task | str] = [tasks] * len(codes)
        else:
            task_list = list(tasks)
            if len(task_list) != len(codes):
                raise ValueError(f"evaluate_batch got {len(task_list)} tasks for {len(codes)} codes")
        items = [self._item(t, c, options, new_request_id()) for t, c in zip(task_list, codes)]
        chunks = [items[i:i + self.batch_chunk] for i in range(0, len(items), self.batch_chunk)]
        answers = await asyncio.gather(*(self._post("/v1/eval/batch", {"items": chunk}) for chunk in chunks))
        return [EvalResponse.model_validate(r).result for answer in answers for r in answer["results"]]

    async def health(self) -> dict[str, Any]:
        """``/v1/health`` of every server: url -> its answer, or ``{"status": "unreachable", ...}``."""
        async def one(url: str) -> dict[str, Any]:
            try:
                resp = await self._http.get(url + "/v1/health")
                return resp.json()
            except httpx.HTTPError as err:
                return {"status": "unreachable", "error": f"{type(err).__name__}: {err}"}

        return dict(zip(self.urls, await asyncio.gather(*(one(u) for u in self.urls))))

    # -- plumbing ------------------------------------------------------------------------------------
    @staticmethod
    def _item(task: Task | str, code: str, options: EvalOptions | None, request_id: str) -> dict[str, Any]:
        if not isinstance(task, (Task, str)):
            raise TypeError(f"task must be a Task or a built-in task name, got {type(task).__name__}")
        return {"request_id": request_id, "task": task if isinstance(task, str) else task.model_dump(mode="json"),
                "code": code, "options": (options or EvalOptions()).model_dump(mode="json")}

    def _pick(self, avoid: str | None) -> _Server:
        now = time.monotonic()
        up = [s for s in self._servers if s.available(now)]
        choices = [s for s in up if s.url != avoid] or up
        if not choices:  # everything is cooling down: try the one that went down first
            return min(self._servers, key=lambda s: s.down_until)
        turn = next(self._turn)
        return min(choices, key=lambda s: (s.outstanding, (self._servers.index(s) - turn) % len(self._servers)))

    def _delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * random.uniform(0.5, 1.0)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        errors: list[str] = []
        avoid: str | None = None
        for attempt in range(self.max_retries + 1):
            server = self._pick(avoid)
            delay = self._delay(attempt)
            server.outstanding += 1
            try:
                resp = await self._http.post(server.url + path, json=body)
            except httpx.TransportError as err:  # connection refused/reset, timeouts, server died mid-answer
                errors.append(f"{server.url}: {type(err).__name__}: {err or 'no detail'}")
                server.consecutive_failures += 1
                server.down_until = time.monotonic() + self.down_for_s * min(8, server.consecutive_failures)
                avoid = server.url
            else:
                if resp.status_code == 200:
                    server.consecutive_failures = 0
                    return resp.json()
                message = _error_message(resp)
                if resp.status_code not in _RETRY_STATUS:
                    raise EvalRequestError(server.url, resp.status_code, message, _detail(resp))
                errors.append(f"{server.url}: HTTP {resp.status_code}: {message}")
                avoid = server.url
                if resp.status_code == 429:
                    retry_after = resp.headers.get("retry-after", "")
                    if retry_after.isdigit():
                        delay = min(self.max_backoff_s, float(retry_after)) * random.uniform(0.8, 1.2)
            finally:
                server.outstanding -= 1
            if attempt < self.max_retries:
                await asyncio.sleep(delay)
        raise EvalServiceUnavailable(self.urls, errors)


def _error_message(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("error", resp.text[:500]))
    except ValueError:
        return resp.text[:500]


def _detail(resp: httpx.Response) -> Any:
    try:
        return resp.json().get("detail")
    except ValueError:
        return None
