"""Tensor store over torchstore on a Monarch mesh: weights travel between processes on any hosts.

A store is a torchstore instance (a controller in the Monarch root process plus one storage
volume actor) that every actor of the same Monarch world reaches by name. The app's main
process creates it once with :meth:`TorchStoreTensorStore.initialize`; handles in other
processes (trainer, generators) connect on first use.

Layout inside the torchstore instance::

    keys/<key>            manifest (a small object): write token, names, dtypes, shapes
    data/<token>/<i>      the i-th tensor of one write

A put writes its tensors under a fresh token, then the manifest (so readers never see a
half-written key), then deletes the tensors of the write it replaced. A reader fetching a
replaced write may find its tensors gone: it then reads the manifest again and retries.
Two writers racing on one key leave the loser's tensors behind (the trainer is the only writer).

Tensors travel as Monarch RPC payloads (torchstore's ``MonarchTransportBuffer``; RDMA where
monarch has it), so each put/get costs a copy through the network stack even on one host: use
the shm backend when trainer and generators share a host.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import torch

from forge_kernels.store.base import StateDict, TensorStore, check_key
from forge_kernels.store.torchstore_compat import connect, is_missing_key, spawn_store

__all__ = ["TorchStoreTensorStore"]

_SINGLE = "__tensor__"  # the one entry of a key stored with put()
_RETRY_S = 30.0


class TorchStoreTensorStore(TensorStore):
    """Tensor store backed by the torchstore instance named ``namespace`` in this Monarch world."""

    def __init__(self, namespace: str = "forge"):
        if not namespace or "/" in namespace or namespace.startswith("."):
            raise ValueError(f"namespace must be a plain name, got {namespace!r}")
        self.namespace = namespace
        self._client: Any = None
        self._owned_mesh: Any = None
        self._owner = False

    # ------------------------------------------------------------------------------- lifecycle

    async def initialize(self, mesh: Any = None) -> None:
        """Create the store (once per app, in the main process): storage volume + controller.

        The volume goes on ``mesh`` (a one-process Monarch ``ProcMesh``, e.g. on another host) or
        in a new process on this host. ``close()`` on this handle shuts the store down.
        """
        if self._owner:
            raise RuntimeError(f"torchstore store {self.namespace!r} was already initialized by this handle")
        try:
            self._owned_mesh = await spawn_store(self.namespace, mesh)
        except Exception as exc:
            if "already initialized" not in str(exc):
                raise
            raise RuntimeError(
                f"torchstore store {self.namespace!r} already exists in this Monarch world; "
                f"other handles just use it (only one process calls initialize)") from None
        self._owner = True

    async def close(self) -> None:
        """Drop this handle's client; the handle that initialized the store also shuts it down."""
        if self._owner:
            controller, _ = await connect(self.namespace)
            await controller.teardown.call()
            if self._owned_mesh is not None:
                await self._owned_mesh.stop()
            self._owner, self._owned_mesh = False, None
        self._client = None

    async def _connected(self) -> Any:
        if self._client is None:
            _, self._client = await connect(self.namespace)
        return self._client

    # --------------------------------------------------------------------------------- tensors

    async def put(self, key: str, tensor: torch.Tensor) -> None:
        await self.put_state_dict({_SINGLE: tensor}, key)

    async def get(self, key: str, inplace_tensor: torch.Tensor | None = None) -> torch.Tensor:
        user = None if inplace_tensor is None else {_SINGLE: inplace_tensor}
        manifest = await self._manifest(key)
        if [e["name"] for e in manifest["tensors"]] != [_SINGLE]:
            raise TypeError(f"key {key!r} holds a state dict, not a tensor: use get_state_dict")
        return (await self.get_state_dict(key, user))[_SINGLE]

    async def put_state_dict(self, state_dict: StateDict, key: str) -> None:
        check_key(key)
        entries = []
        for name, tensor in state_dict.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"state dict entry {name!r} is a {type(tensor).__name__}, not a tensor")
            entries.append({"name": name, "dtype": tensor.dtype, "shape": list(tensor.shape)})
        client = await self._connected()
        token = uuid.uuid4().hex
        await asyncio.gather(*(
            client.put(f"data/{token}/{i}", tensor.detach().contiguous())
            for i, tensor in enumerate(state_dict.values())))
        replaced = await self._manifest(key, missing_ok=True)
        await client.put(f"keys/{key}", {"token": token, "tensors": entries})  # publish
        if replaced:
            await self._delete_data(replaced)

    async def get_state_dict(self, key: str, user_state_dict: StateDict | None = None) -> StateDict:
        client = await self._connected()
        deadline = time.monotonic() + _RETRY_S
        while time.monotonic() < deadline:
            manifest = await self._manifest(key)
            entries = manifest["tensors"]
            _check_destination(key, entries, user_state_dict)
            try:
                fetched = await asyncio.gather(*(
                    client.get(f"data/{manifest['token']}/{i}") for i in range(len(entries))))
            except Exception as exc:
                if not is_missing_key(exc):
                    raise
                continue  # replaced (and its tensors deleted) while we read: read the new write
            out: StateDict = {}
            for entry, tensor in zip(entries, fetched, strict=True):
                if user_state_dict is None:
                    out[entry["name"]] = tensor
                else:
                    out[entry["name"]] = user_state_dict[entry["name"]].copy_(tensor)
            return out
        raise RuntimeError(f"key {key!r} kept changing while being read (for {_RETRY_S:.0f} s)")

    async def delete(self, key: str) -> None:
        manifest = await self._manifest(key)
        await (await self._connected()).delete(f"keys/{key}")
        await self._delete_data(manifest)

    async def keys(self, prefix: str = "") -> list[str]:
        # torchstore's own prefix filter matches whole "."-separated parts only: filter here
        names = await (await self._connected()).keys(None)
        return sorted(k[len("keys/"):] for k in names if k.startswith("keys/" + prefix))

    # --------------------------------------------------------------------------------- helpers

    async def _manifest(self, key: str, missing_ok: bool = False) -> dict:
        check_key(key)
        client = await self._connected()
        try:
            return await client.get(f"keys/{key}")
        except KeyError:
            if missing_ok:
                return {}
            raise KeyError(f"no key {key!r} in torchstore store {self.namespace!r}") from None

    async def _delete_data(self, manifest: dict) -> None:
        client = await self._connected()
        await asyncio.gather(*(
            client.delete(f"data/{manifest['token']}/{i}") for i in range(len(manifest["tensors"]))))


def _check_destination(key: str, entries: list[dict], user: StateDict | None) -> None:
    """Every user tensor must match the stored name, dtype and shape (checked before any copy)."""
    if user is None:
        return
    stored = {e["name"] for e in entries}
    if set(user) != stored:
        raise KeyError(
            f"user_state_dict does not match key {key!r}: missing {sorted(stored - set(user))}, "
            f"unexpected {sorted(set(user) - stored)}")
    for entry in entries:
        dst = user[entry["name"]]
        if list(dst.shape) != entry["shape"] or dst.dtype != entry["dtype"]:
            raise ValueError(
                f"{key!r}/{entry['name']}: stored {entry['dtype']} {entry['shape']}, "
                f"destination is {dst.dtype} {list(dst.shape)}")
