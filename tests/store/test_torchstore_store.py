"""torchstore backend specifics: weights crossing Monarch processes, store lifecycle, the
monarch 0.7 compatibility shim, and the error when torchstore is missing."""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid

import pytest
import torch

from forge_kernels.runtime import spawn
from forge_kernels.store import StoreConfig, build_store, weights_key


@pytest.fixture
def ts_config() -> StoreConfig:
    return StoreConfig(backend="torchstore", namespace=f"x{uuid.uuid4().hex[:8]}")


def test_trainer_process_publishes_generator_process_loads(run, ts_config, weight_actors, volume_mesh):
    """A trainer-like actor in one monarch process puts its state dict; a generator-like actor in
    another process reads it into its own tensors; the main process reads the same values."""
    WeightPublisher, WeightConsumer = weight_actors.WeightPublisher, weight_actors.WeightConsumer

    async def scenario():
        store = build_store(ts_config)
        await store.initialize(mesh=volume_mesh)  # the app's main process creates the store
        trainer, generator = await asyncio.gather(  # each in its own monarch process
            spawn(WeightPublisher, ts_config.model_dump(), backend="monarch"),
            spawn(WeightConsumer, ts_config.model_dump(), backend="monarch"))
        try:
            published = await trainer.publish.call_one(weights_key(1))
            loaded = await generator.load.call_one(weights_key(1))
            in_main = await store.get_state_dict(weights_key(1))
            return published, loaded, in_main, await store.keys()
        finally:
            await trainer.stop()
            await generator.stop()
            await store.close()

    published, loaded, in_main, keys = run(scenario())
    assert keys == [weights_key(1)]
    assert loaded["in_place"], "the generator's tensors were reallocated instead of refreshed"
    assert loaded["sums"] == pytest.approx(published, abs=0, rel=0)
    assert {k: float(v.sum()) for k, v in in_main.items()} == published
    assert set(published) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_store_must_be_initialized_once(run, ts_config, volume_mesh):
    handle = build_store(ts_config)
    with pytest.raises(RuntimeError, match=rf"store '{ts_config.namespace}' does not exist .*initialize"):
        run(handle.keys())
    owner = build_store(ts_config)
    run(owner.initialize(mesh=volume_mesh))
    try:
        with pytest.raises(RuntimeError, match="already exists"):
            run(build_store(ts_config).initialize(mesh=volume_mesh))
        run(handle.put("k", torch.ones(2)))  # the handle that failed before works now
        assert run(owner.get("k")).tolist() == [1.0, 1.0]
    finally:
        run(owner.close())
    with pytest.raises(RuntimeError, match="does not exist"):  # close() shut the store down
        run(build_store(ts_config).keys())


def test_reader_retries_when_its_version_is_deleted_inside_the_volume(run, ts_config, volume_mesh):
    """The race CI once hit: the controller still lists a tensor when the reader looks it up, the
    writer deletes it before the volume serves it, and the volume's KeyError arrives wrapped in
    an ActorError. The reader must take the newer version, not fail."""
    store = build_store(ts_config)
    run(store.initialize(mesh=volume_mesh))
    try:
        run(store.put_state_dict({"w": torch.zeros(4)}, "latest"))
        client = run(store._connected())
        real_locate = client._locate_volumes
        located: list[str] = []

        async def locate_then_replace(key: str):
            volumes = await real_locate(key)
            located.append(key)
            # torchstore's get locates a tensor twice (its type, then its volume); after the
            # second lookup, before the volume serves it, the writer replaces the version
            if key.startswith("data/") and located.count(key) == 2 and len(set(located)) == 2:
                await store.put_state_dict({"w": torch.ones(4)}, "latest")
            return volumes

        client._locate_volumes = locate_then_replace
        out = run(store.get_state_dict("latest"))
        assert len({k for k in located if k.startswith("data/")}) == 2, located  # retried on the new version
        assert out["w"].tolist() == [1.0] * 4
    finally:
        run(store.close())


def test_monarch_still_refuses_torchstores_own_controller(run):
    """Why the shim exists: remove AsyncController once monarch spawns torchstore's Controller."""
    from monarch.actor import get_or_spawn_controller
    from torchstore.controller import Controller

    with pytest.raises(Exception, match="mixes both async and sync endpoints"):
        run(get_or_spawn_controller(f"plain{uuid.uuid4().hex[:6]}", Controller))


def test_missing_torchstore_says_how_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "torchstore" or m.startswith("torchstore.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("forge_kernels.store.torchstore_compat", "forge_kernels.store.torchstore_backend"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, "torchstore", None)  # import torchstore -> ImportError
    with pytest.raises(ImportError, match=r"needs torchstore: pip install --no-deps torchstore==0.1.2 pygtrie"):
        build_store(StoreConfig(backend="torchstore"))
    with pytest.raises(ImportError, match="scripts/install.sh"):
        importlib.import_module("forge_kernels.store.torchstore_backend")
