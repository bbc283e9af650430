"""The CUDA IPC store (device buffers shared between processes): its contract on a GPU, and a
clear error where there is none. The versioning and locking it inherits from the shm store are
covered by the contract tests on CPU (tests/store/test_store_contract.py)."""

from __future__ import annotations

import multiprocessing as mp
import uuid

import pytest
import torch

from forge_kernels.store import StoreConfig, build_store, weights_key


def test_cuda_ipc_without_cuda_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="cuda_ipc needs a CUDA device; use backend=shm"):
        build_store(StoreConfig(backend="cuda_ipc", namespace="t", root=str(tmp_path)))


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def _config(tmp_path) -> dict:
    return {"backend": "cuda_ipc", "namespace": f"t{uuid.uuid4().hex[:8]}", "root": str(tmp_path)}


def _reader(cfg: dict, device: int, keys: list[str], out: mp.Queue) -> None:
    """Another process: read each key into its own device tensors, report sums and devices."""
    torch.cuda.set_device(device)
    store = build_store(StoreConfig(**cfg))
    own = {"w": torch.zeros(256, 1024, device=device), "b": torch.zeros(7, dtype=torch.bfloat16, device=device)}
    for key in keys:
        store.get_state_dict_sync(key, own)
        out.put((key, float(own["w"].sum()), float(own["b"].float().sum()), str(own["w"].device)))
    store.close_sync()


@pytest.mark.gpu
def test_round_trip_in_process_and_in_place(tmp_path, cuda):
    store = build_store(StoreConfig(**_config(tmp_path)))
    sd = {"w": torch.randn(64, 33, device="cuda"), "i": torch.arange(5, device="cuda"),
          "e": torch.empty(0, 3, device="cuda"), "h": torch.randn(9, device="cuda").half(),
          "t": torch.randn(8, 4, device="cuda").t()}
    store.put_state_dict_sync(sd, "weights/v0")
    out = store.get_state_dict_sync("weights/v0")
    for k, v in sd.items():
        assert out[k].is_cuda and out[k].dtype == v.dtype and torch.equal(out[k], v), k
    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    ptrs = {k: t.data_ptr() for k, t in target.items()}
    store.get_state_dict_sync("weights/v0", target)
    assert all(target[k].data_ptr() == ptrs[k] and torch.equal(target[k], sd[k]) for k in sd)
    store.close_sync(unlink=True)


@pytest.mark.gpu
def test_another_process_on_another_gpu_reads_each_version(tmp_path, cuda):
    """Versions pushed by this process are read by a process on the last GPU, in place, and the
    segments are reused (v and v-1 alive, v-2 deleted), so the reader sees every version whole."""
    cfg = _config(tmp_path)
    store = build_store(StoreConfig(**cfg))
    keys = [weights_key(v) for v in range(4)]
    for v, key in enumerate(keys):
        store.put_state_dict_sync({"w": torch.full((256, 1024), float(v), device="cuda"),
                                   "b": torch.full((7,), float(v), dtype=torch.bfloat16, device="cuda")}, key)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    device = torch.cuda.device_count() - 1
    proc = ctx.Process(target=_reader, args=(cfg, device, keys[2:], out))
    proc.start()
    got = [out.get(timeout=120) for _ in keys[2:]]
    proc.join(timeout=60)
    assert proc.exitcode == 0
    for (key, w, b, dev), v in zip(got, (2, 3), strict=True):
        assert w == 256 * 1024 * v and b == 7 * v and dev == f"cuda:{device}", key
    store.close_sync(unlink=True)


@pytest.mark.gpu
def test_torn_reads_never_happen_under_concurrent_pushes(tmp_path, cuda):
    """A writer keeps publishing versions (deleting v-2) while a reader in the same process reads
    the newest: every read is one whole version (all tensors hold the same value)."""
    import threading

    cfg = _config(tmp_path)
    writer, reader = build_store(StoreConfig(**cfg)), build_store(StoreConfig(**cfg))
    stop, errors, reads = threading.Event(), [], [0]

    def write() -> None:
        for v in range(60):
            writer.put_state_dict_sync({f"p{i}": torch.full((1 << 16,), float(v), device="cuda") for i in range(4)},
                                       weights_key(v))
            if v >= 2:
                writer.delete_sync(weights_key(v - 2))
        stop.set()

    def read() -> None:
        while not stop.is_set():
            keys = reader.keys_sync("weights/")
            if not keys:
                continue
            try:
                sd = reader.get_state_dict_sync(max(keys, key=lambda k: int(k.split("/v")[1])))
            except KeyError:
                continue  # deleted between keys() and get(): allowed
            values = {float(t[0]) for t in sd.values()} | {float(t[-1]) for t in sd.values()}
            if len(values) != 1:
                errors.append(values)
            reads[0] += 1

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and reads[0] > 0
    assert writer.segment_count() <= 3
    writer.close_sync(unlink=True)
