"""Services: several replicas of one actor behind a router, with health checks and fail-over.

``await svc.generate.one(prompt)`` sends to one healthy replica (chosen by the router, or by
the current sticky session); ``await svc.update.all(v)`` calls every healthy replica;
``svc.update.broadcast(v)`` does so without waiting. Inside ``async with svc.session():`` every
``one`` of this task goes to the same replica. ``route`` and ``fanout`` are the older names of
``one`` and ``all`` (the verbs are shared with meshes: :mod:`forge_kernels.runtime.handle`).

When a replica dies (its call fails with :class:`ActorDiedError`, or the periodic health check
finds it dead) it leaves the rotation, its in-flight and queued requests are re-sent to healthy
replicas, and it is restarted in the background (at most ``max_restarts`` times). Each request
is answered exactly once; a request that was running on the dead replica runs again elsewhere,
so routed endpoints should be idempotent. With no healthy replica and no restart pending, a
request fails with :class:`NoHealthyReplicaError` instead of waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from forge_kernels.metrics import ReducerState
from forge_kernels.runtime.actor import Actor
from forge_kernels.runtime.errors import ActorDiedError, NoHealthyReplicaError, RuntimeStoppedError
from forge_kernels.runtime.handle import EndpointCall, Handle
from forge_kernels.runtime.mesh import ActorMesh
from forge_kernels.runtime.routers import Replica, make_router
from forge_kernels.runtime.settings import RuntimeConfig

__all__ = ["Service", "ServiceEndpoint"]

log = logging.getLogger(__name__)
MeshFactory = Callable[[], Awaitable[ActorMesh]]
_session_ids = itertools.count()
_CURRENT_SESSION: ContextVar[tuple[int, int] | None] = ContextVar("forge_session", default=None)


class Service(Handle):
    """Replicas of one actor class; build with ``spawn(..., replicas=n)``."""

    def __init__(self, actor_class: type[Actor], meshes: list[ActorMesh], factory: MeshFactory,
                 settings: RuntimeConfig) -> None:
        super().__init__(actor_class, f"{actor_class.__name__}Service")
        self.settings = settings
        self.replicas = [Replica(i, m) for i, m in enumerate(meshes)]
        self._factory = factory
        self._router = make_router(settings.router)
        self._background: set[asyncio.Future[Any]] = set()
        self._sessions: dict[int, Replica] = {}
        self._restarts: dict[int, asyncio.Task[None]] = {}
        self._changed = asyncio.Event()  # set (and replaced) whenever replica health changes
        self._monitor = asyncio.get_running_loop().create_task(self._monitor_health())

    # ---------------------------------------------------------------- calls
    def endpoint(self, name: str) -> ServiceEndpoint:
        self.check_endpoint(name)
        return ServiceEndpoint(self, name)

    async def route(self, endpoint: str, args: tuple, kwargs: dict) -> Any:
        """Run ``endpoint`` on one replica (all its ranks; rank 0's result), failing over on death."""
        self.check_endpoint(endpoint)
        while True:
            replica = await self._pick()
            mesh = replica.mesh
            replica.outstanding += 1
            try:
                results = await mesh.invoke_all(endpoint, args, kwargs)
                return results[0]
            except ActorDiedError as err:
                self._replica_died(replica, mesh, err.reason)  # then retry on another replica
            finally:
                replica.outstanding -= 1

    async def fanout(self, endpoint: str, args: tuple, kwargs: dict) -> list[Any]:
        """Run ``endpoint`` on every healthy replica; rank-0 results in replica order.

        A replica that dies during the call raises :class:`ActorDiedError` here.
        """
        self.check_endpoint(endpoint)
        targets = [(r, r.mesh) for r in self.replicas if r.healthy]
        if not targets:
            raise NoHealthyReplicaError(self._no_replica_message())
        results = await asyncio.gather(
            *(mesh.invoke_all(endpoint, args, kwargs) for _, mesh in targets), return_exceptions=True
        )
        for (replica, mesh), result in zip(targets, results):
            if isinstance(result, ActorDiedError):
                self._replica_died(replica, mesh, result.reason)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r[0] for r in results]  # type: ignore[index]

    def send_all(self, endpoint: str, args: tuple, kwargs: dict) -> None:
        """Fire and forget :meth:`fanout`: failures are logged, never raised."""
        self.check_endpoint(endpoint)
        task = asyncio.ensure_future(self.fanout(endpoint, args, kwargs))
        self._background.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broadcast to %s failed: %s", self.name, task.exception())

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[int]:
        """Sticky session: every ``route`` in this block (this task) goes to one replica."""
        sid = next(_session_ids)
        token = _CURRENT_SESSION.set((id(self), sid))
        try:
            yield sid
        finally:
            _CURRENT_SESSION.reset(token)
            self._sessions.pop(sid, None)

    async def _pick(self) -> Replica:
        session = _CURRENT_SESSION.get()
        sid = session[1] if session is not None and session[0] == id(self) else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.failover_timeout_s
        while True:
            if self.stopped:
                raise RuntimeStoppedError(f"{self.name} has been stopped")
            if sid is not None and (sticky := self._sessions.get(sid)) is not None and sticky.healthy:
                return sticky
            healthy = [r for r in self.replicas if r.healthy]
            if healthy:
                chosen = self._router.choose(healthy)
                if sid is not None:
                    self._sessions[sid] = chosen
                return chosen
            if not self._restarts:
                raise NoHealthyReplicaError(self._no_replica_message())
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NoHealthyReplicaError(
                    f"{self.name}: no replica became healthy within "
                    f"{self.settings.failover_timeout_s}s; " + self._no_replica_message()
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def _no_replica_message(self) -> str:
        failures = "; ".join(
            f"replica {r.index}: {r.last_failure or 'down'} (restarted {r.restarts}x)"
            for r in self.replicas
        )
        return (f"{self.name} has no healthy replica and none is restarting "
                f"(max_restarts={self.settings.max_restarts}): {failures}")

    # ---------------------------------------------------------------- health and restarts
    def _replica_died(self, replica: Replica, mesh: ActorMesh, reason: str) -> None:
        if not replica.healthy or replica.mesh is not mesh or self.stopped:
            return  # already handled, or the failure is from a mesh that was replaced
        replica.healthy = False
        replica.last_failure = reason
        log.warning("%s replica %d died: %s", self.name, replica.index, reason)
        if replica.restarts < self.settings.max_restarts:
            self._restarts[replica.index] = asyncio.get_running_loop().create_task(
                self._restart(replica)
            )
        self._notify()

    async def _restart(self, replica: Replica) -> None:
        old = replica.mesh
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), self.settings.stop_timeout_s)
            replica.mesh = await asyncio.wait_for(self._factory(), self.settings.setup_timeout_s)
            replica.restarts += 1
            replica.healthy = True
            log.warning("%s replica %d restarted (%d/%d)", self.name, replica.index,
                        replica.restarts, self.settings.max_restarts)
        except Exception as err:
            replica.restarts = self.settings.max_restarts  # a failed restart is not retried
            replica.last_failure = f"restart failed: {type(err).__name__}: {err}"
            log.error("%s replica %d could not be restarted: %s", self.name, replica.index, err)
        finally:
            self._restarts.pop(replica.index, None)
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _monitor_health(self) -> None:
        while not self.stopped:
            await asyncio.sleep(self.settings.health_interval_s)
            for replica in self.replicas:
                mesh = replica.mesh
                if replica.healthy and not mesh.is_alive():
                    self._replica_died(replica, mesh, mesh.death_reason() or "health check failed")

    # ---------------------------------------------------------------- metrics and shutdown
    async def drain_metrics(self) -> list[dict[str, ReducerState]]:
        states: list[dict[str, ReducerState]] = []
        for replica in self.replicas:
            if replica.healthy:
                states.extend(await replica.mesh.drain_metrics())
        return states

    async def stop(self) -> None:
        """Stop the health monitor, pending restarts and every replica (idempotent)."""
        if self.stopped:
            return
        self.stopped = True
        for task in list(self._background):
            task.cancel()
        self._monitor.cancel()
        for task in list(self._restarts.values()):
            task.cancel()
        await asyncio.gather(self._monitor, *self._restarts.values(), return_exceptions=True)
        await asyncio.gather(*(r.mesh.stop() for r in self.replicas), return_exceptions=True)
        self._notify()

    async def __aenter__(self) -> Service:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        healthy = sum(r.healthy for r in self.replicas)
        return f"<Service {self.name} {healthy}/{len(self.replicas)} healthy>"


class ServiceEndpoint(EndpointCall):
    """The verbs of one endpoint on a service."""

    def __init__(self, service: Service, endpoint: str) -> None:
        self.service = service
        self.endpoint = endpoint

    async def one(self, *args: Any, **kwargs: Any) -> Any:
        """One replica, chosen by the router (or the current sticky session); all its ranks run,
        rank 0 answers."""
        return await self.service.route(self.endpoint, args, kwargs)

    async def all(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Every healthy replica; results in replica order."""
        return await self.service.fanout(self.endpoint, args, kwargs)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Every healthy replica, without waiting; failures are logged."""
        self.service.send_all(self.endpoint, args, kwargs)

    route, fanout = one, all  # the older names
