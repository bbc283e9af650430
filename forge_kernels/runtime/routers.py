"""Routers: which healthy replica of a service serves the next ``route`` call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from forge_kernels.runtime.mesh import ActorMesh

__all__ = ["LeastLoadedRouter", "Replica", "RoundRobinRouter", "Router", "RouterName", "make_router"]

RouterName = Literal["round_robin", "least_loaded"]


@dataclass(eq=False)
class Replica:
    """One replica of a service: its current mesh (replaced on restart) and its load."""

    index: int
    mesh: ActorMesh
    outstanding: int = 0  # requests sent and not yet answered
    healthy: bool = True
    restarts: int = 0
    last_failure: str = ""


class Router(Protocol):
    def choose(self, replicas: Sequence[Replica]) -> Replica:
        """Pick one of ``replicas`` (non-empty, all healthy)."""
        ...


class RoundRobinRouter:
    """Cycles through the replicas by index, skipping unhealthy ones."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, replicas: Sequence[Replica]) -> Replica:
        ordered = sorted(replicas, key=lambda r: r.index)
        for replica in ordered:
            if replica.index >= self._next:
                break
        else:
            replica = ordered[0]
        self._next = replica.index + 1
        return replica


class LeastLoadedRouter:
    """The replica with the fewest outstanding requests (ties: lowest index)."""

    def choose(self, replicas: Sequence[Replica]) -> Replica:
        return min(replicas, key=lambda r: (r.outstanding, r.index))


def make_router(name: RouterName) -> Router:
    if name == "round_robin":
        return RoundRobinRouter()
    if name == "least_loaded":
        return LeastLoadedRouter()
    raise ValueError(f"unknown router {name!r}; expected 'round_robin' or 'least_loaded'")
