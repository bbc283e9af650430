"""``spawn`` actors on a backend, ``shutdown`` everything, and collect their metrics.

::

    mesh = await spawn(Counter, {"start": 1})                           # one local actor
    mesh = await spawn(Counter, cfg, procs=2, backend="monarch")        # two processes
    svc = await spawn(Counter, cfg, replicas=3, router="least_loaded")  # a Service
    ...
    await shutdown()                                                    # everything spawned
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
from collections.abc import Mapping
from typing import Any

from forge_kernels.config import StrictModel, validate
from forge_kernels.metrics import ReducerState
from forge_kernels.runtime.actor import Actor, endpoint_names, validate_actor_config
from forge_kernels.runtime.hosts import HOSTS, host_name, next_live_host
from forge_kernels.runtime.local import LocalActorMesh
from forge_kernels.runtime.mesh import ActorMesh, MeshEndpoint, RankView
from forge_kernels.runtime.service import Service, ServiceEndpoint
from forge_kernels.runtime.settings import RuntimeConfig

__all__ = ["collect_metric_states", "live_handles", "shutdown", "spawn"]

log = logging.getLogger(__name__)
Handle = ActorMesh | Service
_LIVE: list[Handle] = []
_RESERVED = (
    set(dir(ActorMesh)) | set(dir(Service)) | set(dir(RankView)) | set(dir(MeshEndpoint))
    | set(dir(ServiceEndpoint)) | {"name", "size", "stopped", "replicas", "settings", "actor_class"}
)


async def spawn(
    actor_class: type[Actor],
    config: StrictModel | Mapping[str, Any] | None = None,
    runtime: RuntimeConfig | Mapping[str, Any] | None = None,
    **overrides: Any,
) -> Any:
    """Start ``actor_class`` with ``config`` (validated into ``actor_class.Config``) and run ``setup()``.

    ``runtime`` (a :class:`RuntimeConfig` or its dict) places it; keyword ``overrides`` replace
    single fields (``procs=2, backend="monarch"``). Returns an :class:`ActorMesh`, or a
    :class:`Service` when ``replicas > 1`` or ``service=True``.
    """
    actor_config = validate_actor_config(actor_class, config)
    settings = _runtime_settings(runtime, overrides)
    _check_endpoint_names(actor_class)

    placement = settings.host_indices()
    restarts = itertools.count()

    async def make_mesh(host: int | None = None) -> ActorMesh:
        if host is None:  # a service restarting a replica: the next of its hosts still alive
            host = next_live_host(placement, next(restarts), settings.hosts)
        return await _spawn_mesh(actor_class, actor_config, settings, host)

    if settings.replicas == 1 and not settings.service:
        handle: Handle = await make_mesh(placement[0])
    else:
        meshes = await asyncio.gather(*(make_mesh(h) for h in placement), return_exceptions=True)
        failed = [m for m in meshes if isinstance(m, BaseException)]
        if failed:
            await asyncio.gather(*(m.stop() for m in meshes if isinstance(m, ActorMesh)))
            raise failed[0]
        handle = Service(actor_class, list(meshes), make_mesh, settings)  # type: ignore[arg-type]
    _LIVE.append(handle)
    return handle


def _runtime_settings(runtime: RuntimeConfig | Mapping[str, Any] | None,
                      overrides: Mapping[str, Any]) -> RuntimeConfig:
    if isinstance(runtime, RuntimeConfig):
        base = runtime.model_dump(exclude_unset=True)
    else:
        base = dict(runtime or {})
    return validate(RuntimeConfig, {**base, **overrides})


def _check_endpoint_names(actor_class: type[Actor]) -> None:
    clash = sorted(n for n in endpoint_names(actor_class) if n in _RESERVED)
    if clash:
        raise TypeError(
            f"{actor_class.__name__} endpoint(s) {clash} shadow names of the runtime's handles; rename them"
        )


async def _spawn_mesh(actor_class: type[Actor], config: StrictModel, settings: RuntimeConfig,
                      host: int) -> ActorMesh:
    """One mesh of ``settings.procs`` actors on host index ``host`` (``-1``: the controller's),
    built and set up within ``setup_timeout_s``."""
    mesh: ActorMesh | None = None

    async def build() -> ActorMesh:
        nonlocal mesh
        if settings.backend == "local":
            mesh = LocalActorMesh(actor_class, config, settings.procs)
        else:
            from forge_kernels.runtime.monarch_backend import MonarchActorMesh  # optional dependency

            if host >= 0:
                await HOSTS.attach(settings.hosts, settings.host_timeout_s)  # type: ignore[arg-type]
            mesh = await MonarchActorMesh.create(actor_class, config, settings.procs, settings.cuda_devices,
                                                 host=host)
        await mesh.invoke_all("setup", (), {})
        return mesh

    try:
        return await asyncio.wait_for(build(), settings.setup_timeout_s)
    except BaseException as err:
        if mesh is not None:
            await mesh.stop()
        if isinstance(err, asyncio.TimeoutError):
            raise TimeoutError(
                f"spawning {actor_class.__name__} on {settings.backend!r} "
                f"({host_name(host, settings.hosts)}) did not finish within "
                f"setup_timeout_s={settings.setup_timeout_s}"
            ) from None
        raise


def live_handles() -> list[Handle]:
    """Handles spawned and not yet stopped."""
    _LIVE[:] = [h for h in _LIVE if not h.stopped]
    return list(_LIVE)


async def shutdown() -> None:
    """Stop every live handle (services, meshes and their processes). Safe to call twice."""
    handles = live_handles()
    _LIVE.clear()
    results = await asyncio.gather(*(h.stop() for h in handles), return_exceptions=True)
    for handle, result in zip(handles, results):
        if isinstance(result, BaseException):
            log.error("stopping %r failed: %s", handle, result)
    _kill_leftovers()
    await HOSTS.close()


def _kill_leftovers() -> None:
    import sys

    if "forge_kernels.runtime.monarch_backend" in sys.modules:
        sys.modules["forge_kernels.runtime.monarch_backend"].kill_leftover_procs()


# Last line of defence (e.g. the event loop died before shutdown() ran): no orphan processes.
atexit.register(_kill_leftovers)


async def collect_metric_states(*handles: Handle) -> list[dict[str, ReducerState]]:
    """Drain the metric states recorded inside ``handles``' processes, for ``MetricLogger.flush``.

    Local actors record straight into this process's collector (which ``flush`` drains itself),
    so they contribute nothing here; monarch actors return their processes' states.
    """
    states: list[dict[str, ReducerState]] = []
    for handle in handles:
        states.extend(await handle.drain_metrics())
    return states
