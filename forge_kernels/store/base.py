"""The tensor store interface (torchstore's shape): versioned weights travel trainer -> generators.

Keys are strings; a state dict is stored under one key (``weights/v7``) and read back either as
new tensors or copied into the caller's own tensors (``user_state_dict``), which is how a
generator refreshes its weights without reallocating them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

__all__ = ["TensorStore", "check_key", "weights_key"]

StateDict = dict[str, torch.Tensor]


def weights_key(version: int, prefix: str = "weights") -> str:
    """The key under which policy ``version`` is published (``weights/v7``)."""
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    return f"{prefix}/v{version}"


def check_key(key: str) -> None:
    """Raise ``ValueError`` unless ``key`` is a relative path of non-empty parts (``weights/v3``)."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"tensor store key must be a non-empty path like 'weights/v3', got {key!r}")


class TensorStore(ABC):
    """Async key -> tensor / state-dict store."""

    @abstractmethod
    async def put(self, key: str, tensor: torch.Tensor) -> None:
        """Store one tensor under ``key`` (replacing any previous value)."""

    @abstractmethod
    async def get(self, key: str, inplace_tensor: torch.Tensor | None = None) -> torch.Tensor:
        """Read ``key``; with ``inplace_tensor`` copy into it and return it."""

    @abstractmethod
    async def put_state_dict(self, state_dict: StateDict, key: str) -> None:
        """Store a whole state dict under ``key``; readers never see it half-written."""

    @abstractmethod
    async def get_state_dict(self, key: str, user_state_dict: StateDict | None = None) -> StateDict:
        """Read a state dict; with ``user_state_dict`` copy into its tensors (names must match)."""

    @abstractmethod
    async def delete(self, key: str) -> None:
        """Remove ``key``; a missing key raises ``KeyError``."""

    @abstractmethod
    async def keys(self, prefix: str = "") -> list[str]:
        """Sorted keys that start with ``prefix``."""

    async def initialize(self) -> None:
        """Create the store's shared state: once per app, in its main process, before other
        processes open the store (default: nothing to create)."""
        return None

    async def close(self) -> None:
        """Release resources held by this handle (default: nothing)."""
        return None
