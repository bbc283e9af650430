"""Join a torch.distributed process group from an explicit rank, world size and master address.

Used by trainers spawned with ``procs > 1`` (each process knows its rank from the runtime) and by
the SFT app's own multi-process launch. gloo on CPU, nccl on CUDA; the env:// variables are set
too, so libraries that read them (TorchTitan, DCP) see the same group.

    from forge_kernels.distributed import DistributedConfig, init_process_group
    init_process_group(DistributedConfig(rank=r, world_size=2, master_port=29511))
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist
from pydantic import Field, model_validator

from forge_kernels.config import StrictModel

__all__ = ["DistributedConfig", "destroy_process_group", "free_port", "init_process_group", "is_distributed"]


class DistributedConfig(StrictModel):
    """Where this process sits in the group and how to reach rank 0."""

    rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    master_addr: str = "127.0.0.1"
    master_port: int = Field(default=29500, ge=1, le=65535)
    backend: Literal["auto", "gloo", "nccl"] = Field(default="auto", description="auto: nccl if CUDA, else gloo")
    timeout_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _rank_in_world(self) -> DistributedConfig:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is outside a world of size {self.world_size} (need rank < world_size)")
        return self


def free_port() -> int:
    """A TCP port that was free a moment ago (for the master address of a local group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_process_group(cfg: DistributedConfig) -> str:
    """Initialise the default process group (idempotent for the same group); returns the backend.

    On nccl, this process's CUDA device is set to ``rank % device_count`` first.
    """
    backend = cfg.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend 'nccl' needs CUDA, but no CUDA device is visible; use 'gloo'")
    if dist.is_initialized():
        if dist.get_world_size() != cfg.world_size or dist.get_rank() != cfg.rank:
            raise RuntimeError(
                f"a process group is already initialised as rank {dist.get_rank()} of {dist.get_world_size()}, "
                f"not rank {cfg.rank} of {cfg.world_size}"
            )
        return dist.get_backend()
    os.environ.update(
        MASTER_ADDR=cfg.master_addr,
        MASTER_PORT=str(cfg.master_port),
        RANK=str(cfg.rank),
        WORLD_SIZE=str(cfg.world_size),
        LOCAL_RANK=str(cfg.rank),
    )
    if backend == "nccl":
        torch.cuda.set_device(cfg.rank % torch.cuda.device_count())
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{cfg.master_addr}:{cfg.master_port}",
        rank=cfg.rank,
        world_size=cfg.world_size,
        timeout=timedelta(seconds=cfg.timeout_s),
    )
    return backend


def is_distributed() -> bool:
    """True when a process group with more than one rank is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def destroy_process_group() -> None:
    """Leave the default process group if one is active."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
