"""The ``monarch`` backend: each mesh is a torchmonarch proc mesh with one actor per process.

A generic host actor (:class:`_Host`, a monarch actor with async endpoints only) constructs the
user's :class:`Actor` inside its process and dispatches endpoint calls by name; monarch's
per-actor message order gives the same one-call-at-a-time mailbox as the local backend. Results
travel back tagged ``("ok", value)`` or ``("err", payload)`` so a user exception becomes an
:class:`ActorCallError` with the remote traceback, never a monarch supervision event.

Death detection: monarch itself reports a dead process only after several seconds, so a
watchdog task polls the pids of the mesh's processes (when they are on this machine); when one is
gone, every in-flight and queued call fails at once with :class:`ActorDiedError`. A mesh on
another host (:mod:`.hosts`) also dies with its host: the host registry probes every host agent
and declares its meshes dead, naming the host, when it stops answering. ``SystemExit`` inside an
endpoint exits the process (``os._exit``), as it would in a plain Python program.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import signal
from collections.abc import Awaitable
from typing import Any

import psutil

from forge_kernels.config import StrictModel
from forge_kernels.metrics import ReducerState, get_collector
from forge_kernels.runtime.actor import Actor
from forge_kernels.runtime.calls import error_payload, run_endpoint
from forge_kernels.runtime.errors import ActorCallError, ActorDiedError
from forge_kernels.runtime.hosts import HOSTS
from forge_kernels.runtime.mesh import ActorMesh

import monarch.actor as monarch_actor
from monarch.actor import current_rank, current_size, endpoint, this_host

__all__ = ["MonarchActorMesh", "kill_leftover_procs"]

log = logging.getLogger(__name__)
_ids = itertools.count()
DEATH_GRACE_S = 0.5  # how long replies already sent by a dead process may take to arrive
WATCHDOG_INTERVAL_S = 0.05
STOP_TIMEOUT_S = 10.0
# pids of every monarch process this controller started and has not yet seen exit
_LIVE_PIDS: set[int] = set()


class _Host(monarch_actor.Actor):
    """Runs inside a monarch process: owns one user actor and calls its endpoints by name."""

    def __init__(self, actor_class: type[Actor], config: StrictModel, cuda_devices: str | None = None) -> None:
        if cuda_devices is not None:  # before anything in this fresh process initialises CUDA
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_devices
        size = math.prod(current_size().values())
        self.actor = actor_class(config, current_rank().rank, size)

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def invoke(self, name: str, args: tuple, kwargs: dict) -> tuple[str, Any]:
        try:
            return ("ok", await run_endpoint(self.actor, name, args, kwargs))
        except SystemExit as err:  # the process exits, as sys.exit() would outside an actor
            code = err.code if isinstance(err.code, int) else 1
            os._exit(code)
        except Exception as err:
            return ("err", error_payload(self.actor, name, err))

    @endpoint
    async def drain_metrics(self) -> dict[str, ReducerState]:
        return get_collector().drain()


def _report_unhandled_fault(failure: Any) -> None:
    """Replaces monarch's default (exit the controller): our watchdogs handle dead processes."""
    log.warning("monarch reported a failed mesh: %s", failure)


def _install_fault_hook() -> None:
    monarch_actor.unhandled_fault_hook = _report_unhandled_fault


def _pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class MonarchActorMesh(ActorMesh):
    """``size`` actors, each in its own process, spawned through torchmonarch."""

    backend = "monarch"

    def __init__(self, actor_class: type[Actor], size: int) -> None:
        super().__init__(actor_class, size, f"{actor_class.__name__.lower()}_{next(_ids)}")
        self._procs: Any = None
        self._host: Any = None
        self._rank_hosts: list[Any] = []
        self.pids: list[int] = []
        self._death: asyncio.Future[str] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.host_address: str | None = None  # None: the controller's host
        self._local_pids = True

    @classmethod
    async def create(cls, actor_class: type[Actor], config: StrictModel, size: int,
                     cuda_devices: str | None = None, host: int = -1) -> MonarchActorMesh:
        """Spawn ``size`` processes and one actor in each; returns once every actor is built.

        ``cuda_devices`` becomes each process's ``CUDA_VISIBLE_DEVICES`` (rank r of a trainer then
        takes the r-th of them, see :mod:`forge_kernels.distributed`). ``host`` is an index into
        the attached hosts (:data:`~forge_kernels.runtime.hosts.HOSTS`); ``-1`` is this host."""
        _install_fault_hook()
        mesh = cls(actor_class, size)
        if host < 0:
            mesh._procs = this_host().spawn_procs(per_host={"procs": size})
        else:
            mesh.host_address = HOSTS.addresses[host]
            # pids of another machine mean nothing here: watched (and reaped) only on loopback
            mesh._local_pids = mesh.host_address.is_loopback
            mesh._procs = HOSTS.procs_on(host, size)
            HOSTS.carry(host, mesh)
        try:
            mesh._host = mesh._procs.spawn(mesh.name, _Host, actor_class, config, cuda_devices)
            mesh._rank_hosts = [mesh._host.slice(procs=r) for r in range(size)]
            pids = await mesh._host.pid.call()
            mesh.pids = [pid for _, pid in sorted(pids.items(), key=lambda kv: kv[0].rank)]
        except Exception as err:
            await mesh._stop()
            raise RuntimeError(
                f"could not start {actor_class.__qualname__} in {size} monarch process(es): {err}\n"
                f"(the actor class, its config and module must be importable in a fresh Python "
                f"process: define it at module level of a module on PYTHONPATH or in __main__)"
            ) from err
        except BaseException:
            await mesh._stop()
            raise
        if mesh._local_pids:
            _LIVE_PIDS.update(mesh.pids)
        mesh._death = asyncio.get_running_loop().create_future()
        mesh._watchdog = asyncio.get_running_loop().create_task(mesh._watch())
        return mesh

    async def _watch(self) -> None:
        assert self._death is not None
        while not self._death.done() and self._local_pids:
            for rank, pid in enumerate(self.pids):
                if _pid_gone(pid):
                    why = f"process {pid} of rank {rank} exited"
                    if self.host_address is not None and await HOSTS.confirm_down(self.host_address, why):
                        return  # the registry declared every mesh of that host dead, naming it
                    self._declare_dead(why)
                    break
            await asyncio.sleep(WATCHDOG_INTERVAL_S)

    def _declare_dead(self, reason: str) -> None:
        if self._death is not None and not self._death.done():
            log.warning("%s is dead: %s", self.name, reason)
            self._death.set_result(reason)

    def host_died(self, reason: str) -> None:
        """Called by the host registry when this mesh's host stopped answering."""
        self._declare_dead(reason)

    def death_reason(self) -> str | None:
        if self._death is not None and self._death.done() and not self._death.cancelled():
            return self._death.result()
        return None

    def submit(self, rank: int, endpoint: str, args: tuple, kwargs: dict) -> Awaitable[Any]:
        self.check_endpoint(endpoint)
        if self.death_reason() is None:  # sent now, so calls keep their order
            return self._answer(rank, endpoint, self._rank_hosts[rank].invoke.call_one(endpoint, args, kwargs))
        return self._answer(rank, endpoint, None)

    async def _answer(self, rank: int, endpoint: str, pending: Any) -> Any:
        """Wait for the reply of a sent call, or for the mesh's death, whichever comes first."""
        self.raise_if_dead(endpoint)
        assert self._death is not None
        call = asyncio.ensure_future(pending)
        try:
            await asyncio.wait((call, self._death), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            raise
        if not call.done():
            # The process died; a reply it sent just before dying may still be on its way: a
            # crash must not take the results of calls that had already finished with it.
            await asyncio.wait({call}, timeout=DEATH_GRACE_S)
        if not call.done():
            call.cancel()
            self.raise_if_dead(endpoint)
        try:
            tag, value = call.result()
        except Exception as err:  # monarch supervision: the process is gone or unreachable
            self._declare_dead(f"monarch: {type(err).__name__}: {err}")
            raise ActorDiedError(f"{self.actor_class.__name__}[{rank}]", endpoint,
                                 self.death_reason() or str(err)) from err
        if tag == "err":
            raise ActorCallError(*value)
        return value

    async def drain_metrics(self) -> list[dict[str, ReducerState]]:
        states = await self._host.drain_metrics.call()
        return [s for _, s in sorted(states.items(), key=lambda kv: kv[0].rank)]

    async def _stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._death is not None and not self._death.done():
            self._death.set_result("stopped")
        if self._procs is not None:
            try:
                await asyncio.wait_for(self._procs.stop(), STOP_TIMEOUT_S)
            except Exception as err:  # a dead or hung process: killed below
                log.warning("stopping %s: %s", self.name, err)
        if self.host_address is not None:
            HOSTS.drop(self)
        if self._local_pids:
            await _reap(self.pids, STOP_TIMEOUT_S)


async def _reap(pids: list[int], timeout_s: float) -> None:
    """Wait for ``pids`` to exit; SIGKILL what is left after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while any(not _pid_gone(p) for p in pids) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    kill_leftover_procs(pids)


def kill_leftover_procs(pids: list[int] | set[int] | None = None) -> None:
    """SIGKILL monarch processes of this controller that are still running (default: all)."""
    targets = list(_LIVE_PIDS if pids is None else pids)
    for pid in targets:
        if not _pid_gone(pid):
            log.warning("killing leftover actor process %d", pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _LIVE_PIDS.discard(pid)
