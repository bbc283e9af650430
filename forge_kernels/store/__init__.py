"""Tensor stores: how versioned weights travel from the trainer to the generators."""

from __future__ import annotations

from typing import Literal

from forge_kernels.config import StrictModel
from forge_kernels.store.base import TensorStore, weights_key
from forge_kernels.store.shm import ShmTensorStore

__all__ = ["ShmTensorStore", "StoreConfig", "TensorStore", "build_store", "weights_key"]


class StoreConfig(StrictModel):
    """The ``store:`` YAML section."""

    backend: Literal["shm"] = "shm"
    namespace: str = "forge"
    root: str = "/dev/shm/forge_kernels"


def build_store(cfg: StoreConfig) -> TensorStore:
    """Open the configured store (every process of an app opens the same namespace)."""
    return ShmTensorStore(cfg.namespace, cfg.root)
