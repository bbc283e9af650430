"""Shared-memory tensor store for one host: trainer and generators in any processes of the host.

Layout under ``root/namespace`` (``/dev/shm`` by default, so nothing touches a disk)::

    segments/<id>   flat byte buffers, preallocated and reused across versions
    keys/<key>.json where each tensor of a key lives: segment, offset, dtype, shape

Freshly created shared memory fills slowly (page faults, ~0.5 GB/s here), so a put reuses any
segment that no key references any more and that is large enough; publishing version v+1 and
deleting version v-1 therefore cycles between two warm segments. Segments stay mapped in each
process that used them.

Consistency: a writer fills a segment under an exclusive ``flock`` (each lock on its own file
descriptor, so threads of one process exclude each other too) and only then publishes the
key's metadata (atomic rename), so readers never see half-written data. A reader holds a shared
lock on the segment while copying and re-checks afterwards that the key still points at the same
write (``token``); a writer never takes a segment a reader holds.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import mmap
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

from forge_kernels.store.base import StateDict, TensorStore, check_key

__all__ = ["ShmTensorStore"]

_ALIGN = 64
_SINGLE = "__tensor__"  # the one entry of a key stored with put()


@dataclass
class _Segment:
    name: str
    fd: int
    size: int
    buffer: mmap.mmap | torch.Tensor  # a host mapping here; a device buffer in subclasses


class ShmTensorStore(TensorStore):
    """Tensor store over files in a tmpfs directory shared by the processes of one host."""

    def __init__(self, namespace: str = "default", root: str | os.PathLike = "/dev/shm/forge_kernels"):
        if not namespace or "/" in namespace or namespace.startswith("."):
            raise ValueError(f"namespace must be a plain name, got {namespace!r}")
        self.dir = Path(root) / namespace
        (self.dir / "segments").mkdir(parents=True, exist_ok=True)
        (self.dir / "keys").mkdir(parents=True, exist_ok=True)
        self._segments: dict[str, _Segment] = {}

    # ---------------------------------------------------------------------------------- async API

    async def put(self, key: str, tensor: torch.Tensor) -> None:
        await asyncio.to_thread(self.put_state_dict_sync, {_SINGLE: tensor}, key)

    async def get(self, key: str, inplace_tensor: torch.Tensor | None = None) -> torch.Tensor:
        user = None if inplace_tensor is None else {_SINGLE: inplace_tensor}
        result = await asyncio.to_thread(self.get_state_dict_sync, key, user)
        if set(result) != {_SINGLE}:
            raise TypeError(f"key {key!r} holds a state dict, not a tensor: use get_state_dict")
        return result[_SINGLE]

    async def put_state_dict(self, state_dict: StateDict, key: str) -> None:
        await asyncio.to_thread(self.put_state_dict_sync, state_dict, key)

    async def get_state_dict(self, key: str, user_state_dict: StateDict | None = None) -> StateDict:
        return await asyncio.to_thread(self.get_state_dict_sync, key, user_state_dict)

    async def delete(self, key: str) -> None:
        self.delete_sync(key)

    async def keys(self, prefix: str = "") -> list[str]:
        return self.keys_sync(prefix)

    async def close(self) -> None:
        self.close_sync()

    # ----------------------------------------------------------------------------------- sync core

    def put_state_dict_sync(self, state_dict: StateDict, key: str) -> None:
        """Copy ``state_dict`` into a (reused) segment and publish it under ``key``."""
        check_key(key)
        entries, total = [], 0
        for name, tensor in state_dict.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"state dict entry {name!r} is a {type(tensor).__name__}, not a tensor")
            nbytes = tensor.numel() * tensor.element_size()
            entries.append({"name": name, "dtype": str(tensor.dtype).removeprefix("torch."),
                            "shape": list(tensor.shape), "offset": total, "nbytes": nbytes})
            total += -(-nbytes // _ALIGN) * _ALIGN
        segment, lock_fd = self._acquire_segment(max(total, _ALIGN))
        try:
            for entry, tensor in zip(entries, state_dict.values(), strict=True):
                self._view(segment, entry).copy_(tensor.detach().reshape(entry["shape"]))
            self._copies_done()
            meta = {"segment": segment.name, "token": uuid.uuid4().hex, "tensors": entries}
            tmp = self._key_path(key).with_suffix(f".tmp{os.getpid()}")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, self._key_path(key))  # publish atomically
        finally:
            os.close(lock_fd)  # releases the exclusive lock

    def get_state_dict_sync(self, key: str, user_state_dict: StateDict | None = None) -> StateDict:
        """Read ``key``; copies into ``user_state_dict``'s tensors when given (names must match)."""
        deadline = time.monotonic() + 30.0  # a reader racing a busy writer retries, within bounds
        while time.monotonic() < deadline:
            meta = self._read_meta(key)
            segment = self._open_segment(meta["segment"])
            lock_fd = self._lock(segment.name, fcntl.LOCK_SH)
            try:
                if self._read_meta(key, missing_ok=True) != meta:
                    continue  # replaced or deleted while we waited for the lock: read again
                return self._copy_out(key, segment, meta["tensors"], user_state_dict)
            finally:
                os.close(lock_fd)
        raise RuntimeError(f"key {key!r} kept changing while being read (for 30 s)")

    def delete_sync(self, key: str) -> None:
        check_key(key)
        try:
            self._key_path(key).unlink()
        except FileNotFoundError:
            raise KeyError(f"no key {key!r} in tensor store {str(self.dir)!r}") from None

    def keys_sync(self, prefix: str = "") -> list[str]:
        root = self.dir / "keys"
        found = (str(p.relative_to(root))[: -len(".json")] for p in root.rglob("*.json"))
        return sorted(k for k in found if k.startswith(prefix))

    def close_sync(self, unlink: bool = False) -> None:
        """Unmap segments; with ``unlink`` also remove the whole namespace from shared memory."""
        for seg in self._segments.values():
            if isinstance(seg.buffer, mmap.mmap):
                seg.buffer.close()
            os.close(seg.fd)
        self._segments.clear()
        if unlink:
            shutil.rmtree(self.dir, ignore_errors=True)

    def segment_count(self) -> int:
        """Segments in the namespace (how many buffers versions have needed so far)."""
        return len(list((self.dir / "segments").iterdir()))

    # ------------------------------------------------------------------------------------ helpers

    def _copy_out(self, key: str, segment: _Segment, entries: list[dict], user: StateDict | None) -> StateDict:
        if user is not None and set(user) != {e["name"] for e in entries}:
            stored = {e["name"] for e in entries}
            raise KeyError(
                f"user_state_dict does not match key {key!r}: missing {sorted(stored - set(user))}, "
                f"unexpected {sorted(set(user) - stored)}"
            )
        out: StateDict = {}
        for entry in entries:
            src = self._view(segment, entry)
            if user is None:
                dst = self._new_tensor(entry["shape"], src.dtype)
            else:
                dst = user[entry["name"]]
                if list(dst.shape) != entry["shape"] or dst.dtype != src.dtype:
                    raise ValueError(
                        f"{key!r}/{entry['name']}: stored {src.dtype} {entry['shape']}, "
                        f"destination is {dst.dtype} {list(dst.shape)}"
                    )
            dst.copy_(src)
            out[entry["name"]] = dst
        self._copies_done()
        return out

    def _new_tensor(self, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
        """Where a read without ``user_state_dict`` puts a tensor (host memory here)."""
        return torch.empty(shape, dtype=dtype)

    def _copies_done(self) -> None:
        """Called before a segment's lock is released after copies into or out of it: the copies
        must be complete by then (host copies are synchronous; device copies override this)."""

    def _view(self, segment: _Segment, entry: dict) -> torch.Tensor:
        dtype = getattr(torch, entry["dtype"])
        if entry["nbytes"] == 0:
            return torch.empty(entry["shape"], dtype=dtype)
        raw = torch.frombuffer(segment.buffer, dtype=torch.uint8, count=entry["nbytes"], offset=entry["offset"])
        return raw.view(dtype).reshape(entry["shape"])

    def _lock(self, name: str, mode: int) -> int:
        """A new file descriptor of segment ``name`` holding an ``flock`` of ``mode``; close it to unlock.

        flock belongs to an open file description, so each lock gets its own: threads of one
        process sharing the cached mapping's fd would otherwise never exclude each other.
        """
        fd = os.open(self.dir / "segments" / name, os.O_RDONLY)
        try:
            fcntl.flock(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _acquire_segment(self, nbytes: int) -> tuple[_Segment, int]:
        """A segment of at least ``nbytes`` that no key references, and the fd of its exclusive lock."""
        in_use = self._segments_in_use()
        candidates = sorted(
            (p for p in (self.dir / "segments").iterdir() if p.name not in in_use),
            key=self._capacity,
        )
        for path in candidates:
            if self._capacity(path) < nbytes:
                continue
            try:
                lock_fd = self._lock(path.name, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a reader (or another writer) is using it
            if path.name in self._segments_in_use():  # another writer published into it meanwhile
                os.close(lock_fd)
                continue
            return self._open_segment(path.name), lock_fd
        name = uuid.uuid4().hex
        fd = os.open(self.dir / "segments" / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        lock_fd = self._lock(name, fcntl.LOCK_EX)  # nobody else knows the name yet: never blocks
        segment = self._segments[name] = self._create_segment(name, fd, nbytes)
        return segment, lock_fd

    def _create_segment(self, name: str, fd: int, nbytes: int) -> _Segment:
        """Back the new (empty, exclusively locked) segment file ``fd`` with at least ``nbytes``."""
        size = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        os.ftruncate(fd, size)
        return _Segment(name, fd, size, mmap.mmap(fd, size))

    def _capacity(self, path: Path) -> int:
        """Bytes the segment at ``path`` can hold."""
        return path.stat().st_size

    def _segments_in_use(self) -> set[str]:
        return {self._read_meta(k, missing_ok=True).get("segment") for k in self.keys_sync()}

    def _open_segment(self, name: str) -> _Segment:
        segment = self._segments.get(name)
        if segment is None:
            segment = self._segments[name] = self._map_segment(name)
        return segment

    def _map_segment(self, name: str) -> _Segment:
        """Map segment ``name``, written by another handle or process, into this one."""
        fd = os.open(self.dir / "segments" / name, os.O_RDWR)
        size = os.fstat(fd).st_size
        return _Segment(name, fd, size, mmap.mmap(fd, size))

    def _key_path(self, key: str) -> Path:
        return self.dir / "keys" / f"{key}.json"

    def _read_meta(self, key: str, missing_ok: bool = False) -> dict:
        check_key(key)
        try:
            return json.loads(self._key_path(key).read_text())
        except FileNotFoundError:
            if missing_ok:
                return {}
            raise KeyError(f"no key {key!r} in tensor store {str(self.dir)!r}") from None

