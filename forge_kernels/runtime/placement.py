"""Where an app's actors run: one ``placement:`` line per actor, and the weight store chosen per
trainer/generator pair from that placement.

The app calls :func:`place_actors` once at start::

    cfg = place_actors(cfg)   # prints the placement lines; store.backend auto -> shm or torchstore
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from forge_kernels.runtime.hosts import host_name
from forge_kernels.runtime.settings import RuntimeConfig
from forge_kernels.store.selection import select_store

__all__ = ["place_actors", "placement_lines"]

Cfg = TypeVar("Cfg")


def placement_lines(runtimes: Mapping[str, RuntimeConfig]) -> Iterator[str]:
    """``placement: <actor> -> <host address>[,<host>...] procs=<n> devices=<...>`` per actor
    (one address per replica; ``local`` for actors in the controller's own process)."""
    for actor, rt in runtimes.items():
        if rt.backend == "local":
            where = "local (controller process)"
        else:
            where = ",".join(host_name(i, rt.hosts) for i in rt.host_indices())
        yield f"placement: {actor} -> {where} procs={rt.procs} devices={rt.cuda_devices or 'cpu'}"


def _actor_names(cfg: Any) -> list[str]:
    """The actor names of an app config: the keys its ``runtime_overrides`` accepts."""
    annotation = type(cfg).model_fields["runtime_overrides"].annotation
    key = typing.get_args(annotation)[0]
    names = list(typing.get_args(key)) or list(cfg.runtime_overrides)
    if not getattr(cfg, "reference_enabled", True):
        names = [n for n in names if n != "reference"]
    return names


def place_actors(cfg: Cfg, print_lines: bool = True) -> Cfg:
    """Print one placement line per actor of ``cfg`` (an app config with ``runtime_for(name)``,
    ``runtime_overrides`` and ``store``) and return ``cfg`` with its store chosen for the
    trainer's and the generators' hosts (see :func:`~forge_kernels.store.selection.select_store`)."""
    runtimes = {name: cfg.runtime_for(name) for name in _actor_names(cfg)}  # type: ignore[attr-defined]
    if print_lines:
        for line in placement_lines(runtimes):
            print(line, flush=True)
    receivers = {n: runtimes[n] for n in ("generator",) if n in runtimes}
    store = select_store(cfg.store, ("trainer", runtimes["trainer"]), receivers)  # type: ignore[attr-defined]
    return cfg.model_copy(update={"store": store})  # type: ignore[attr-defined]
