"""A vLLM worker extension that loads a policy version from the tensor store inside the worker.

vLLM mixes this class into each of its workers (``worker_extension_cls``), so its methods run
where the model lives and are invoked by name with ``collective_rpc``. Only plain data crosses
the RPC boundary — the store settings and a key — never pickled functions or tensors: the worker
opens the store itself and reads the Hugging Face-named tensors straight from shared memory.

Loading goes through ``model_runner.reload_weights``, which maps checkpoint names onto vLLM's
fused parameters and redoes any post-load processing (the CPU backend repacks weights after
loading, which is why a plain ``model.load_weights`` is not enough there).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from forge_kernels.store import StoreConfig, TensorStore, build_store

__all__ = ["StoreWeightLoader"]

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, whether or not a loop is running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="forge-store-read")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


class StoreWeightLoader:
    """Methods vLLM adds to its worker; ``self`` is the worker (it has ``model_runner``)."""

    _forge_store: TensorStore | None = None
    _forge_store_settings: dict[str, Any] | None = None

    def _store(self, settings: dict[str, Any]) -> TensorStore:
        # keep one handle per worker: the shm backend keeps segments mapped between versions
        if self._forge_store is None or self._forge_store_settings != settings:
            self._forge_store = build_store(StoreConfig.model_validate(settings))
            self._forge_store_settings = dict(settings)
        return self._forge_store

    def load_weights_from_store(self, store_settings: dict[str, Any], key: str) -> int:
        """Read the state dict under ``key`` and load it into this worker's model in place.

        Returns the number of tensors loaded (the caller checks every worker loaded the same).
        """
        state_dict = _run(self._store(store_settings).get_state_dict(key))
        if not state_dict:
            raise ValueError(f"tensor store key {key!r} holds an empty state dict")
        self.model_runner.reload_weights(weights_iterator=iter(state_dict.items()))  # type: ignore[attr-defined]
        return len(state_dict)
