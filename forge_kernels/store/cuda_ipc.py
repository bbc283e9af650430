"""GPU-to-GPU tensor store for one host: versions live in device buffers shared over CUDA IPC.

The versioning, locking and metadata are the shared-memory store's (:mod:`forge_kernels.store.shm`:
keys publish atomically, readers hold a shared lock while copying, a writer reuses a segment no
key references and no reader holds). What differs is where a segment's bytes live: in a device
buffer on the writer's GPU, whose CUDA IPC handle is the content of the segment's file. A reader
on another GPU (or the same one) opens the handle once and copies straight into its own device
tensors, so weights never round-trip through host memory (NVLink or PCIe peer copies).

Chosen over NCCL broadcast because it needs no process group between trainer and generators
(either side may restart, and generators join at any version) and over pinned host staging
because that crosses the host link twice. Cost: the trainer's GPU holds the staging segments, two
for steady state (version v being read while v+1 is written), each the size of the weights.

Within one process (the local runtime backend puts every actor in one process) CUDA refuses to
open a process's own IPC handles, so segments created in this process are used directly.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import torch

from forge_kernels.store.shm import ShmTensorStore, _Segment

__all__ = ["CudaIpcTensorStore"]

# segments this process created, by path: CUDA cannot open its own process's IPC handles
_OWN_SEGMENTS: dict[str, torch.Tensor] = {}
_ALIGN = 256  # device buffers: keep every tensor 256-byte aligned for vectorised copies


class CudaIpcTensorStore(ShmTensorStore):
    """Tensor store whose segments are device buffers on ``device``, shared over CUDA IPC.

    ``root`` holds the metadata, locks and handles (``/dev/shm/...`` by default: tiny files).
    Reads without ``user_state_dict`` return tensors on the reader's current CUDA device.
    """

    def __init__(self, namespace: str = "default", root: str | os.PathLike = "/dev/shm/forge_kernels",
                 device: int | str | torch.device | None = None):
        if not torch.cuda.is_available():
            raise RuntimeError("store.backend=cuda_ipc needs a CUDA device; use backend=shm on this machine")
        super().__init__(namespace, root)
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"CudaIpcTensorStore needs a cuda device, got {self.device}")

    # -- segment backing: a device buffer and its IPC handle --------------------------------------

    def _create_segment(self, name: str, fd: int, nbytes: int) -> _Segment:
        size = -(-nbytes // _ALIGN) * _ALIGN
        buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        handle = buffer.untyped_storage()._share_cuda_()
        header = json.dumps({"size": size, "device": self.device.index}).encode()
        payload = pickle.dumps(handle)  # bytes and ints only: the handle tuple CUDA gave us
        os.write(fd, len(header).to_bytes(4, "little") + header + payload)
        _OWN_SEGMENTS[self._segment_path(name)] = buffer
        return _Segment(name, fd, size, buffer)

    def _map_segment(self, name: str) -> _Segment:
        path = self._segment_path(name)
        fd = os.open(path, os.O_RDWR)
        own = _OWN_SEGMENTS.get(path)
        if own is not None:
            return _Segment(name, fd, own.numel(), own)
        header, handle = self._read_handle(fd)
        storage = torch.UntypedStorage._new_shared_cuda(*handle)
        buffer = torch.empty(0, dtype=torch.uint8, device=torch.device("cuda", header["device"]))
        buffer.set_(storage, 0, (header["size"],), (1,))
        return _Segment(name, fd, header["size"], buffer)

    def _capacity(self, path: Path) -> int:
        own = _OWN_SEGMENTS.get(str(path))
        if own is not None:
            return own.numel()
        fd = os.open(path, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size < 4:
                return -1  # another writer is still creating it
            header, _ = self._read_handle(fd)
        finally:
            os.close(fd)
        return header["size"] if header["device"] == self.device.index else -1  # write only to our GPU

    def _view(self, segment: _Segment, entry: dict) -> torch.Tensor:
        dtype = getattr(torch, entry["dtype"])
        if entry["nbytes"] == 0:
            return torch.empty(entry["shape"], dtype=dtype, device=segment.buffer.device)
        raw = segment.buffer[entry["offset"]: entry["offset"] + entry["nbytes"]]
        return raw.view(dtype).reshape(entry["shape"])

    def _new_tensor(self, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=torch.device("cuda", torch.cuda.current_device()))

    def _copies_done(self) -> None:
        # copies are asynchronous on the device: finish them before a lock is released or a key
        # published, so no reader sees half a version and no writer overwrites one being read
        torch.cuda.synchronize()

    def close_sync(self, unlink: bool = False) -> None:
        for seg in self._segments.values():
            _OWN_SEGMENTS.pop(self._segment_path(seg.name), None)
        super().close_sync(unlink)

    # -- helpers -----------------------------------------------------------------------------------

    def _segment_path(self, name: str) -> str:
        return str(self.dir / "segments" / name)

    @staticmethod
    def _read_handle(fd: int) -> tuple[dict, tuple]:
        data = os.pread(fd, 1 << 16, 0)
        if len(data) < 4:
            raise RuntimeError("CUDA IPC segment file is empty: its writer died before sharing it")
        n = int.from_bytes(data[:4], "little")
        return json.loads(data[4: 4 + n]), pickle.loads(data[4 + n:])  # noqa: S301 - written by our writer
