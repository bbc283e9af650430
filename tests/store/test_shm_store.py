"""Shared-memory store specifics (the common contract is in test_store_contract.py): reuse of
segments, another OS process, threads racing on the sync API, config."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import uuid

import pytest
import torch

from forge_kernels.store import ShmTensorStore, StoreConfig, build_store, weights_key


@pytest.fixture
def store(tmp_path):
    s = ShmTensorStore(f"t-{uuid.uuid4().hex[:8]}", root=tmp_path)
    yield s
    s.close_sync(unlink=True)


def run(coro):
    return asyncio.run(coro)


def test_segments_reused_across_versions(store, sample_state_dict):
    """Publishing v and deleting v-2 cycles between a fixed set of warm segments."""
    sd = sample_state_dict()
    for v in range(8):
        run(store.put_state_dict({k: t + 0 for k, t in sd.items()}, weights_key(v)))
        if v >= 2:
            run(store.delete(weights_key(v - 2)))
    assert store.segment_count() == 3
    assert torch.equal(run(store.get_state_dict(weights_key(7)))["embed.weight"], sd["embed.weight"])


def _child_reads(root: str, namespace: str, queue) -> None:
    s = ShmTensorStore(namespace, root=root)
    sd = asyncio.run(s.get_state_dict("weights/v3"))
    queue.put({k: v.tolist() for k, v in sd.items()})
    asyncio.run(s.put("from_child", torch.tensor([42.0])))
    s.close_sync()


def test_another_process_reads_and_writes(store):
    sd = {"a": torch.randn(3, 3), "b": torch.arange(4)}
    run(store.put_state_dict(sd, "weights/v3"))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_reads, args=(str(store.dir.parent), store.dir.name, queue))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert got == {k: v.tolist() for k, v in sd.items()}
    assert run(store.get("from_child")).tolist() == [42.0]


def test_readers_never_see_torn_versions(store):
    """A writer publishes versions (each tensor filled with v) while readers read the latest."""
    n = 200_000
    stop = threading.Event()
    errors: list[str] = []

    def writer():
        for v in range(1, 40):
            store.put_state_dict_sync({"a": torch.full((n,), float(v)), "b": torch.full((n,), float(v))}, "latest")
        stop.set()

    def reader():
        while not stop.is_set():
            try:
                sd = store.get_state_dict_sync("latest")
            except KeyError:
                continue
            values = torch.cat([sd["a"], sd["b"]]).unique()
            if values.numel() != 1:
                errors.append(f"torn read: {values[:5].tolist()}")

    store.put_state_dict_sync({"a": torch.zeros(n), "b": torch.zeros(n)}, "latest")
    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert store.get_state_dict_sync("latest")["a"][0].item() == 39.0


def test_build_store_from_config(tmp_path):
    store = build_store(StoreConfig(namespace="cfg", root=str(tmp_path)))
    run(store.put("k", torch.ones(1)))
    assert (tmp_path / "cfg" / "keys" / "k.json").is_file()
    with pytest.raises(ValueError, match="plain name"):
        ShmTensorStore("../x", root=tmp_path)
