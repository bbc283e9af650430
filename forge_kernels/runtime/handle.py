"""What every handle on actors shares: endpoints by attribute, and one vocabulary of verbs.

A handle is an :class:`~forge_kernels.runtime.mesh.ActorMesh` (one actor per rank), one rank of
it, or a :class:`~forge_kernels.runtime.service.Service` (replicas behind a router). Each
endpoint of the actor class is an attribute of the handle with the same three verbs everywhere:

* ``await handle.ep.one(...)``  one answer: a single actor, one replica chosen by the router, or
  — for a multi-rank mesh or replica, an SPMD group that acts as one — every rank, rank 0's answer;
* ``await handle.ep.all(...)``  every rank (mesh) or every healthy replica (service), in order;
* ``handle.ep.broadcast(...)``  every rank or replica, without waiting (failures are logged).

The older verbs stay as aliases: ``call`` (= ``all``) on meshes, ``route`` / ``fanout`` on
services, and ``call_one`` (a single-rank mesh only, strict). Handles built by
:func:`~forge_kernels.runtime.spawn` may be annotated with their actor class (``generator:
Generator``), so an editor follows ``generator.generate.one(...)`` to ``Generator.generate``;
:data:`~forge_kernels.runtime.actor.endpoint` types the verbs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from forge_kernels.runtime.actor import Actor, endpoint_names
from forge_kernels.runtime.errors import RuntimeStoppedError

__all__ = ["EndpointCall", "Handle"]


class EndpointCall(ABC):
    """The verbs of one endpoint on one handle."""

    endpoint: str

    @abstractmethod
    async def one(self, *args: Any, **kwargs: Any) -> Any:
        """One answer (see the module docstring for what "one" means on each handle)."""

    @abstractmethod
    async def all(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Every rank or every healthy replica; answers in rank or replica order."""

    @abstractmethod
    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Every rank or replica, returning at once; failures are logged, never raised."""


class Handle(ABC):
    """Base of mesh, rank and service handles: ``handle.<endpoint>`` gives its :class:`EndpointCall`."""

    def __init__(self, actor_class: type[Actor], name: str) -> None:
        self.actor_class = actor_class
        self.name = name
        self.stopped = False
        self._endpoints = endpoint_names(actor_class)

    @abstractmethod
    def endpoint(self, name: str) -> EndpointCall:
        """The verbs of endpoint ``name`` (checked to exist)."""

    def check_endpoint(self, endpoint: str) -> None:
        """Raise if this handle is stopped or its actor class has no endpoint ``endpoint``."""
        if self.stopped:
            raise RuntimeStoppedError(f"{self.name} has been stopped; cannot call {endpoint!r}")
        if endpoint not in self._endpoints:
            raise AttributeError(
                f"{self.actor_class.__name__} has no endpoint {endpoint!r} "
                f"(endpoints: {', '.join(sorted(self._endpoints))})"
            )

    def __getattr__(self, name: str) -> EndpointCall:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.endpoint(name)
