"""Actor-mesh handles: one actor per rank, called through ``handle.<endpoint>.<verb>(...)``.

``await mesh.add.one(3)`` calls a single-rank mesh (a multi-rank mesh runs it on every rank and
answers rank 0's result); ``await mesh.add.all(3)`` calls every rank and returns the per-rank
results in rank order; ``mesh.add.broadcast(3)`` sends to every rank without waiting (errors are
logged). ``mesh.at(r)`` addresses one rank of a larger mesh. The verbs are shared with services
(:mod:`forge_kernels.runtime.handle`); ``call`` and ``call_one`` are the older names.
Backends implement :class:`ActorMesh`'s three abstract methods; everything else is shared, so
both backends present the same behaviour.
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Awaitable
from typing import Any

from forge_kernels.metrics import ReducerState
from forge_kernels.runtime.actor import Actor
from forge_kernels.runtime.errors import ActorDiedError
from forge_kernels.runtime.handle import EndpointCall, Handle

__all__ = ["ActorMesh", "MeshEndpoint", "RankView"]

log = logging.getLogger(__name__)


class ActorMesh(Handle):
    """Handle on ``size`` instances of one actor class (rank 0..size-1), on one backend."""

    backend: str = ""

    def __init__(self, actor_class: type[Actor], size: int, name: str) -> None:
        super().__init__(actor_class, name)
        self.size = size
        self._background: set[asyncio.Future[Any]] = set()

    # ---- what a backend provides
    @abstractmethod
    def submit(self, rank: int, endpoint: str, args: tuple, kwargs: dict) -> Awaitable[Any]:
        """Enqueue ``endpoint`` on ``rank`` now (before returning) and return its pending answer.

        Awaiting the answer raises :class:`ActorCallError` if the endpoint raised and
        :class:`ActorDiedError` if the actor died first (also for calls still queued).
        """

    @abstractmethod
    def death_reason(self) -> str | None:
        """Why this mesh is dead (any rank gone), or None while every rank is alive."""

    @abstractmethod
    async def _stop(self) -> None:
        """Release the actors (and their processes); must not hang."""

    async def drain_metrics(self) -> list[dict[str, ReducerState]]:
        """Metric states recorded inside this mesh's processes since the last drain."""
        return []

    # ---- shared behaviour
    async def invoke(self, rank: int, endpoint: str, args: tuple, kwargs: dict) -> Any:
        """Run ``endpoint`` on ``rank`` and return its result."""
        return await self.submit(rank, endpoint, args, kwargs)

    def is_alive(self) -> bool:
        return not self.stopped and self.death_reason() is None

    async def invoke_all(self, endpoint: str, args: tuple, kwargs: dict) -> list[Any]:
        """Run ``endpoint`` on every rank concurrently; results in rank order."""
        self.check_endpoint(endpoint)
        if self.size == 1:
            return [await self.invoke(0, endpoint, args, kwargs)]
        return list(await asyncio.gather(
            *[self.submit(r, endpoint, args, kwargs) for r in range(self.size)]
        ))

    def send(self, rank: int, endpoint: str, args: tuple, kwargs: dict) -> None:
        """Fire and forget: enqueue the call now; failures are logged, never raised."""
        task = asyncio.ensure_future(self.submit(rank, endpoint, args, kwargs))
        self._background.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broadcast to %s failed: %s", self.name, task.exception())

    def raise_if_dead(self, endpoint: str) -> None:
        reason = self.death_reason()
        if reason is not None:
            raise ActorDiedError(self.name, endpoint, reason)

    async def stop(self) -> None:
        """Stop every actor of the mesh (idempotent). Pending fire-and-forget calls are dropped."""
        if self.stopped:
            return
        self.stopped = True
        for task in list(self._background):
            task.cancel()
        await self._stop()

    def at(self, rank: int) -> RankView:
        """A handle on one rank of this mesh."""
        if not 0 <= rank < self.size:
            raise IndexError(f"rank {rank} is out of range for {self.name} of size {self.size}")
        return RankView(self, rank)

    def endpoint(self, name: str) -> MeshEndpoint:
        self.check_endpoint(name)
        return MeshEndpoint(self, name, None)

    async def __aenter__(self) -> ActorMesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else ("alive" if self.is_alive() else "dead")
        return f"<{type(self).__name__} {self.name} size={self.size} {state}>"


class RankView(Handle):
    """One rank of a mesh: ``mesh.at(1).add.one(3)``."""

    def __init__(self, mesh: ActorMesh, rank: int) -> None:
        super().__init__(mesh.actor_class, f"{mesh.name}[{rank}]")
        self.mesh = mesh
        self.rank = rank

    def endpoint(self, name: str) -> MeshEndpoint:
        self.mesh.check_endpoint(name)
        return MeshEndpoint(self.mesh, name, self.rank)


class MeshEndpoint(EndpointCall):
    """The verbs of one endpoint on a mesh (or on one rank of it)."""

    def __init__(self, mesh: ActorMesh, endpoint: str, rank: int | None) -> None:
        self.mesh = mesh
        self.endpoint = endpoint
        self.rank = rank

    async def one(self, *args: Any, **kwargs: Any) -> Any:
        """This rank's answer; on a whole mesh of several ranks (an SPMD group, e.g. a sharded
        trainer whose steps are collectives) every rank runs it and rank 0's answer is returned."""
        if self.rank is None and self.mesh.size > 1:
            return (await self.mesh.invoke_all(self.endpoint, args, kwargs))[0]
        return await self.mesh.invoke(0 if self.rank is None else self.rank, self.endpoint, args, kwargs)

    async def all(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Every rank (or just this one, on a rank view); results in rank order."""
        if self.rank is not None:
            return [await self.mesh.invoke(self.rank, self.endpoint, args, kwargs)]
        return await self.mesh.invoke_all(self.endpoint, args, kwargs)

    call = all  # the older name

    async def call_one(self, *args: Any, **kwargs: Any) -> Any:
        """The older, strict verb: a single actor's result (the mesh must have one rank, or use ``at``)."""
        rank = self.rank
        if rank is None:
            if self.mesh.size != 1:
                raise ValueError(
                    f"call_one needs a single actor but {self.mesh.name} has {self.mesh.size} ranks; "
                    f"use .call() or mesh.at(rank).{self.endpoint}.call_one()"
                )
            rank = 0
        return await self.mesh.invoke(rank, self.endpoint, args, kwargs)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Send to every rank and return at once; failures are logged."""
        ranks = range(self.mesh.size) if self.rank is None else (self.rank,)
        for r in ranks:
            self.mesh.send(r, self.endpoint, args, kwargs)
