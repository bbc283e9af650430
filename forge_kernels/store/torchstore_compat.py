"""Everything needed to run torchstore 0.1.2 on torchmonarch 0.7, in one place.

torchstore 0.1.2 (the newest release) was written against torchmonarch 0.1.2 and pins it (and
torch 2.9). It is installed here without its dependencies (``scripts/install.sh``) and runs on
torchmonarch 0.7 with one shim:

* **Async controller endpoints.** torchstore's ``Controller`` actor has two async endpoints
  (``init``, ``teardown``) and five sync ones. Monarch 0.7 refuses to spawn an actor that mixes
  the two (``_actor_kind``: "mixes both async and sync endpoints", because a sync endpoint that
  blocks would stall the actor's asyncio loop), so :class:`AsyncController` redeclares the five
  sync endpoints as async ones running the same bodies. Its ``StorageVolume`` actor is all-async
  and works unchanged.
* **RDMA probe.** torchstore asks ``monarch.rdma.is_rdma_available()`` on every put and get;
  monarch 0.7 deprecated it (it now has several RDMA backends) and warns on each call. Its
  documented meaning, "RDMA over ibverbs is available", is ``is_ibverbs_available()``, which
  :func:`_patch_rdma_probe` gives torchstore instead: same answer, no warning per tensor. (Without
  ibverbs, as on the CPU machines here, tensors travel as Monarch RPC payloads; torchstore's RDMA
  path on monarch 0.7 is untested here. ``TORCHSTORE_RDMA_ENABLED=0`` turns it off.)

We also bypass ``torchstore.api``: it hard-codes ``Controller`` (the class that cannot be
spawned) and its ``keys()`` ignores ``store_name``. :func:`spawn_store` and :func:`connect` do
what ``torchstore.initialize`` and ``torchstore.client`` do, with :class:`AsyncController`.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["AsyncController", "connect", "import_torchstore", "is_missing_key", "spawn_store"]

INSTALL_HINT = (
    "pip install --no-deps torchstore==0.1.2 pygtrie (torchstore 0.1.2 pins torch 2.9 and "
    "torchmonarch 0.1.2; this project runs it on its own torch and torchmonarch 0.7, so install it "
    "without dependencies; `bash scripts/install.sh` does this), or use store: {backend: shm}"
)


def import_torchstore() -> None:
    """Import torchstore and monarch, or raise ``ImportError`` saying how to install them."""
    try:
        import monarch.actor  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the torchstore store backend runs on Monarch: pip install 'torchmonarch>=0.7,<0.8' "
            "(Linux only), or use store: {backend: shm}"
        ) from exc
    try:
        import torchstore  # noqa: F401  (also raises Monarch's RPC frame limit for big tensors)
    except ImportError as exc:
        raise ImportError(f"the torchstore store backend needs torchstore: {INSTALL_HINT}") from exc


import_torchstore()

from monarch.actor import ActorError, endpoint, get_or_spawn_controller, this_host  # noqa: E402
from torchstore.client import LocalClient  # noqa: E402
from torchstore.controller import Controller  # noqa: E402
from torchstore.storage_volume import StorageVolume  # noqa: E402
from torchstore.strategy import SingletonStrategy  # noqa: E402
from torchstore.transport import buffers as _torchstore_buffers  # noqa: E402


def _patch_rdma_probe() -> None:
    try:
        from monarch.rdma import is_ibverbs_available
    except ImportError:  # a monarch without the new probe still has the old, undeprecated one
        return
    _torchstore_buffers.monarch_rdma_available = is_ibverbs_available


_patch_rdma_probe()


def _as_async_endpoint(name: str) -> Any:
    """An async endpoint running the body of ``Controller``'s sync endpoint ``name``."""
    sync_body = getattr(Controller, name)._method  # monarch keeps the decorated function here

    @functools.wraps(sync_body)
    async def body(self: Controller, *args: Any, **kwargs: Any) -> Any:
        return sync_body(self, *args, **kwargs)

    return endpoint(body)


class AsyncController(Controller):
    """torchstore's ``Controller`` with only async endpoints (monarch 0.7 cannot mix them)."""

    get_controller_strategy = _as_async_endpoint("get_controller_strategy")
    locate_volumes = _as_async_endpoint("locate_volumes")
    notify_put = _as_async_endpoint("notify_put")
    notify_delete = _as_async_endpoint("notify_delete")
    keys = _as_async_endpoint("keys")


async def spawn_store(name: str, mesh: Any = None) -> Any:
    """Create store ``name``: one storage volume and its controller (``torchstore.initialize``).

    The volume is spawned on ``mesh`` (a one-process ``ProcMesh``) or, without one, in a new
    process on this host; returns the proc mesh created for it (None when ``mesh`` was given),
    for the caller to stop at shutdown. The controller lives in this Monarch world's root process.
    """
    strategy = SingletonStrategy()
    own_mesh = None
    if mesh is None:
        own_mesh = mesh = this_host().spawn_procs(per_host={"procs": 1})
    volumes = mesh.spawn(f"{name}_volume", StorageVolume, strategy.get_volume_id)
    controller = await get_or_spawn_controller(name, AsyncController)
    await controller.init.call(strategy=strategy, num_storage_volumes=1, storage_volumes=volumes)
    return own_mesh


async def connect(name: str) -> tuple[Any, LocalClient]:
    """The controller of store ``name`` and a client for it (``torchstore.client``).

    Raises ``RuntimeError`` when the store was not created in this Monarch world.
    """
    controller = await get_or_spawn_controller(name, AsyncController)
    try:
        strategy = await controller.get_controller_strategy.call_one()
    except Exception as exc:
        if "initialize" not in str(exc):
            raise
        raise RuntimeError(
            f"torchstore store {name!r} does not exist in this Monarch world: call "
            f"`await store.initialize()` once in the app's main process before other processes use "
            f"it (processes outside that Monarch world, e.g. ones vLLM spawns, cannot reach it)"
        ) from None
    return controller, LocalClient(controller=controller, strategy=strategy)


def is_missing_key(exc: BaseException) -> bool:
    """True when ``exc`` says a key is gone: a local KeyError, or one raised in the storage volume.

    torchstore turns the controller's "no such key" into a KeyError, but a key deleted between
    the controller's lookup and the volume's read fails inside the volume actor, and that
    KeyError reaches the client wrapped in Monarch's ``ActorError``.
    """
    return isinstance(exc, KeyError) or (
        isinstance(exc, ActorError) and isinstance(exc.exception, KeyError))
