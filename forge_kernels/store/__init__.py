"""Tensor stores: how versioned weights travel from the trainer to the generators."""

from __future__ import annotations

from typing import Literal

from forge_kernels.config import StrictModel
from forge_kernels.store.base import TensorStore, weights_key
from forge_kernels.store.shm import ShmTensorStore

__all__ = ["ShmTensorStore", "StoreConfig", "TensorStore", "build_store", "weights_key"]


class StoreConfig(StrictModel):
    """The ``store:`` YAML section.

    ``backend``: ``shm`` (shared memory, one host), ``cuda_ipc`` (device buffers shared over CUDA
    IPC, one host with GPUs: weights go GPU to GPU) or ``torchstore`` (a torchstore instance on
    the Monarch mesh, any hosts; the app's main process calls ``await store.initialize()`` once);
    ``auto`` picks shm when the trainer and the generators share a host, torchstore otherwise
    (resolved at start by :func:`forge_kernels.runtime.placement.place_actors`).
    ``root`` is where the shm and cuda_ipc backends keep their files; torchstore ignores it.
    """

    backend: Literal["auto", "shm", "cuda_ipc", "torchstore"] = "shm"
    namespace: str = "forge"
    root: str = "/dev/shm/forge_kernels"


def build_store(cfg: StoreConfig) -> TensorStore:
    """Open the configured store (every process of an app opens the same namespace)."""
    if cfg.backend == "auto":
        raise ValueError("store.backend: auto must be resolved from the actors' placement first "
                         "(forge_kernels.runtime.placement.place_actors)")
    if cfg.backend == "torchstore":
        # imported here: torchstore is optional, and importing it without torchstore installed
        # raises an ImportError that says how to install it
        from forge_kernels.store.torchstore_backend import TorchStoreTensorStore

        return TorchStoreTensorStore(cfg.namespace)
    if cfg.backend == "cuda_ipc":
        from forge_kernels.store.cuda_ipc import CudaIpcTensorStore

        return CudaIpcTensorStore(cfg.namespace, cfg.root)
    return ShmTensorStore(cfg.namespace, cfg.root)
