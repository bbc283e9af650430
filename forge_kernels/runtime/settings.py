"""``RuntimeConfig``: where and how an actor runs — the ``runtime:`` keys of an actor's YAML."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from forge_kernels.config import StrictModel
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

    host: int | list[int] | None = Field(
        None, description="index into runtime.hosts (or one per replica); monarch only")

    @model_validator(mode="after")
    def _devices_need_processes(self) -> RuntimeConfig:
        # local actors share the controller's process: one actor cannot see other GPUs than another
        if self.cuda_devices is not None and self.backend != "monarch":
            raise ValueError(f"cuda_devices={self.cuda_devices!r} needs backend: monarch "
                             f"(local actors share one process, so they share its GPUs)")
        if self.host is not None and self.backend != "monarch":
            raise ValueError(f"host={self.host!r} needs backend: monarch (local actors run in the "
                             f"controller's process)")
        return self
