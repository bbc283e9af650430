"""The ``local`` backend: actors live in the caller's process and event loop.

Each rank has a mailbox (an ``asyncio.Queue``) drained by one task, so calls to one actor run
one at a time in arrival order, exactly like a monarch actor. Arguments and return values are
deep-copied (tensors cloned), so the caller and the actor never share mutable objects: the
same program behaves the same here and across processes.

An endpoint that raises ``SystemExit`` (``sys.exit()``) kills its actor, the in-process analogue
of its process exiting: that call and every call queued behind it fail with
:class:`ActorDiedError`, and so does every later call.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from forge_kernels.config import StrictModel
from forge_kernels.runtime.actor import Actor
from forge_kernels.runtime.calls import copy_value, error_payload, run_endpoint
from forge_kernels.runtime.errors import ActorCallError, ActorDiedError
from forge_kernels.runtime.mesh import ActorMesh

__all__ = ["LocalActorMesh"]

_ids = itertools.count()
_STOP = object()


class _LocalRank:
    """One actor instance with its mailbox and the task that drains it."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.mailbox: asyncio.Queue[Any] = asyncio.Queue()
        self.dead_reason: str | None = None
        self.worker = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            item = await self.mailbox.get()
            if item is _STOP:
                return
            fut, endpoint, args, kwargs = item
            if fut.cancelled():
                continue
            if self.dead_reason is not None:
                fut.set_exception(ActorDiedError(self.actor.name, endpoint, self.dead_reason))
                continue
            try:
                result = copy_value(await run_endpoint(self.actor, endpoint, args, kwargs))
            except SystemExit as err:
                self.dead_reason = f"{endpoint} called sys.exit({err.code!r})"
                if not fut.done():
                    fut.set_exception(ActorDiedError(self.actor.name, endpoint, self.dead_reason))
                self._fail_queued()
            except asyncio.CancelledError:  # the mesh is being stopped
                if not fut.done():
                    fut.set_exception(ActorDiedError(self.actor.name, endpoint, "stopped"))
                raise
            except Exception as err:  # the caller gets it, with the traceback text
                if not fut.done():
                    fut.set_exception(ActorCallError(*error_payload(self.actor, endpoint, err)))
            else:
                if not fut.done():
                    fut.set_result(result)

    def _fail_queued(self) -> None:
        while not self.mailbox.empty():
            item = self.mailbox.get_nowait()
            if item is _STOP:
                self.mailbox.put_nowait(_STOP)
                return
            fut, endpoint, _, _ = item
            if not fut.done():
                fut.set_exception(ActorDiedError(self.actor.name, endpoint, self.dead_reason or "dead"))


class LocalActorMesh(ActorMesh):
    """``size`` actors in this process, one mailbox each."""

    backend = "local"

    def __init__(self, actor_class: type[Actor], config: StrictModel, size: int) -> None:
        super().__init__(actor_class, size, f"{actor_class.__name__}#{next(_ids)}")
        self._ranks = [_LocalRank(actor_class(config, r, size)) for r in range(size)]

    def submit(self, rank: int, endpoint: str, args: tuple, kwargs: dict) -> asyncio.Future[Any]:
        self.check_endpoint(endpoint)
        state = self._ranks[rank]
        fut = asyncio.get_running_loop().create_future()
        if state.dead_reason is not None:
            fut.set_exception(ActorDiedError(state.actor.name, endpoint, state.dead_reason))
        else:
            state.mailbox.put_nowait((fut, endpoint, copy_value(args), copy_value(kwargs)))
        return fut

    def death_reason(self) -> str | None:
        for state in self._ranks:
            if state.dead_reason is not None:
                return f"{state.actor.name}: {state.dead_reason}"
        return None

    async def _stop(self) -> None:
        for state in self._ranks:
            state.dead_reason = state.dead_reason or "stopped"
            state._fail_queued()
            state.worker.cancel()
        await asyncio.gather(*(s.worker for s in self._ranks), return_exceptions=True)
