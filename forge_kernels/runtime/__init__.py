"""Actor runtime: typed actors on asyncio (``local``) or in processes (``monarch``), and services.

See the README's "Actor runtime" section. The public API::

    Actor, endpoint              write an actor (its settings: a nested ``Config`` model)
    spawn, shutdown              start actors / stop everything
    ActorMesh, Service           handles: call_one / call / broadcast, route / fanout / session
    RuntimeConfig                backend, procs, replicas, router, health settings (YAML)
    collect_metric_states        metrics recorded in actor processes, for MetricLogger.flush
"""

from forge_kernels.runtime.actor import Actor, EmptyConfig, endpoint
from forge_kernels.runtime.errors import (
    ActorCallError,
    ActorDiedError,
    NoHealthyReplicaError,
    RuntimeStoppedError,
)
from forge_kernels.runtime.mesh import ActorMesh
from forge_kernels.runtime.service import Service
from forge_kernels.runtime.settings import RuntimeConfig
from forge_kernels.runtime.spawn import collect_metric_states, live_handles, shutdown, spawn

__all__ = [
    "Actor",
    "ActorCallError",
    "ActorDiedError",
    "ActorMesh",
    "EmptyConfig",
    "NoHealthyReplicaError",
    "RuntimeConfig",
    "RuntimeStoppedError",
    "Service",
    "collect_metric_states",
    "endpoint",
    "live_handles",
    "shutdown",
    "spawn",
]
