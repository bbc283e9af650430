"""Which store moves weights from the trainer to a generator, chosen from where both run.

``store.backend: auto`` picks shared memory (``shm``) when every replica of the trainer and of
the generator is on one host, and ``torchstore`` (Monarch RPC, any hosts) otherwise. An explicit
``shm`` or ``cuda_ipc`` for actors on different hosts is a configuration error naming both hosts:
those stores are files and device handles of one machine.
"""

from __future__ import annotations

from collections.abc import Mapping

from forge_kernels.runtime.hosts import check_store_pair
from forge_kernels.runtime.settings import RuntimeConfig
from forge_kernels.store import StoreConfig

__all__ = ["select_store"]


def select_store(store: StoreConfig, trainer: tuple[str, RuntimeConfig],
                 receivers: Mapping[str, RuntimeConfig]) -> StoreConfig:
    """The store config to use for ``trainer`` sending weights to each of ``receivers``."""
    trainer_name, trainer_rt = trainer
    trainer_hosts = _hosts_of(trainer_rt)
    same_host = all(set(_hosts_of(rt)) <= set(trainer_hosts) and len(set(trainer_hosts)) == 1
                    for rt in receivers.values())
    if store.backend == "auto":
        return store.model_copy(update={"backend": "shm" if same_host else "torchstore"})
    for name, rt in receivers.items():
        check_store_pair(store.backend, trainer_name, trainer_hosts, name, _hosts_of(rt),
                         trainer_rt.hosts or rt.hosts)
    return store


def _hosts_of(rt: RuntimeConfig) -> list[int]:
    return rt.host_indices()
