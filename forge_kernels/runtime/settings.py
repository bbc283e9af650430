"""``RuntimeConfig``: where and how an actor runs — the ``runtime:`` keys of an actor's YAML."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from forge_kernels.config import StrictModel
from forge_kernels.runtime.hosts import host_indices, parse_host, read_hostfile
from forge_kernels.runtime.routers import RouterName

__all__ = ["Backend", "RuntimeConfig"]

Backend = Literal["local", "monarch"]


class RuntimeConfig(StrictModel):
    """Placement and supervision of one spawned actor (or service).

    ``replicas > 1`` (or ``service: true``) makes a :class:`Service`; otherwise a mesh of
    ``procs`` actors. Health checks, restarts and fail-over apply to services.
    """

    backend: Backend = "local"
    procs: int = Field(1, ge=1, description="actors (processes, on monarch) per replica")
    replicas: int = Field(1, ge=1, description="independent copies behind a router")
    service: bool = Field(False, description="make a Service even with one replica")
    router: RouterName = "round_robin"
    setup_timeout_s: float = Field(600.0, gt=0, description="spawn + setup() must finish within this")
    health_interval_s: float = Field(0.1, gt=0, description="how often a service checks its replicas")
    stop_timeout_s: float = Field(10.0, gt=0, description="stopping a dead replica may take this long")
    max_restarts: int = Field(3, ge=0, description="restarts per replica before it stays down")
    failover_timeout_s: float = Field(
        120.0, gt=0, description="how long a request waits for a healthy replica before failing"
    )
    cuda_devices: str | None = Field(
        None, pattern=r"^\d+(,\d+)*$",
        description="GPUs this actor's processes see, e.g. '4,5' (CUDA_VISIBLE_DEVICES; monarch only)",
    )

    hosts: list[str] = Field(
        default_factory=list, description="host agents, tcp://HOST:PORT (`forge-kernels worker`); "
                                          "empty: every process on the controller's host")
    hostfile: str | None = Field(None, description="a file of host agents, one tcp://HOST:PORT a line")
    host: int | list[int] | None = Field(
        None, description="index into hosts where this actor runs, or one index per replica")
    host_timeout_s: float = Field(
        30.0, gt=0, le=60, description="a host whose agent does not answer this long is declared dead")

    @model_validator(mode="before")
    @classmethod
    def _read_hostfile(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("hostfile") is not None:
            if data.get("hosts"):
                raise ValueError(f"give runtime.hosts or runtime.hostfile ({data['hostfile']!r}), not both")
            data = {**data, "hosts": [str(h) for h in read_hostfile(data["hostfile"])]}
        return data

    @field_validator("hosts")
    @classmethod
    def _valid_hosts(cls, hosts: list[str]) -> list[str]:
        return [parse_host(h) for h in hosts]

    @model_validator(mode="after")
    def _devices_need_processes(self) -> RuntimeConfig:
        # local actors share the controller's process: one actor cannot see other GPUs than another
        if self.cuda_devices is not None and self.backend != "monarch":
            raise ValueError(f"cuda_devices={self.cuda_devices!r} needs backend: monarch "
                             f"(local actors share one process, so they share its GPUs)")
        if self.host is not None:
            if self.backend != "monarch":
                raise ValueError(f"host={self.host!r} needs backend: monarch (local actors run in "
                                 f"the controller's process)")
            host_indices("this actor", self.host, self.replicas, self.hosts)
        return self

    def host_indices(self) -> list[int]:
        """Host index of each replica (``-1``: the controller's host; see :mod:`.hosts`)."""
        if self.backend != "monarch":
            return [-1] * self.replicas
        return host_indices("this actor", self.host, self.replicas, self.hosts)  # type: ignore[arg-type]
