"""The tensor store contract, run on every backend (shm and torchstore): round trips of all
dtypes, in-place reads, single tensors, errors, keys and versions, readers racing a writer."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_kernels.store import weights_key


def test_state_dict_round_trip_all_dtypes(store, run, sample_state_dict):
    sd = sample_state_dict()
    run(store.put_state_dict(sd, "weights/v0"))
    out = run(store.get_state_dict("weights/v0"))
    assert list(out) == list(sd)
    for name, tensor in sd.items():
        assert out[name].dtype == tensor.dtype and out[name].shape == tensor.shape, name
        assert torch.equal(out[name], tensor), name


def test_get_into_user_tensors_in_place(store, run, sample_state_dict):
    sd = sample_state_dict(1)
    run(store.put_state_dict(sd, "w"))
    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    ptrs = {k: v.data_ptr() for k, v in target.items()}
    out = run(store.get_state_dict("w", user_state_dict=target))
    for name in sd:
        assert out[name] is target[name] and target[name].data_ptr() == ptrs[name]
        assert torch.equal(target[name], sd[name])


def test_single_tensor_put_get_and_errors(store, run):
    t = torch.randn(4, 4)
    run(store.put("x/t", t))
    assert torch.equal(run(store.get("x/t")), t)
    into = torch.empty(4, 4)
    assert run(store.get("x/t", inplace_tensor=into)) is into and torch.equal(into, t)
    run(store.put_state_dict({"a": t}, "sd"))
    with pytest.raises(TypeError, match="holds a state dict"):
        run(store.get("sd"))
    with pytest.raises(ValueError, match=r"stored torch.float32 \[4, 4\], destination is torch.float32 \[2, 8\]"):
        run(store.get("x/t", inplace_tensor=torch.empty(2, 8)))
    with pytest.raises(KeyError, match="missing \\['a'\\], unexpected \\['b'\\]"):
        run(store.get_state_dict("sd", {"b": t}))
    with pytest.raises(KeyError, match="no key 'nope'"):
        run(store.get("nope"))
    with pytest.raises(ValueError, match="must be a non-empty path"):
        run(store.put("../escape", t))
    with pytest.raises(TypeError, match="'a' is a list, not a tensor"):
        run(store.put_state_dict({"a": [1, 2]}, "bad"))
    assert run(store.keys()) == ["sd", "x/t"]  # failed puts left nothing behind


def test_keys_delete_and_versions(store, run):
    for v in range(3):
        run(store.put_state_dict({"w": torch.full((2,), float(v))}, weights_key(v)))
    run(store.put("other", torch.zeros(1)))
    assert run(store.keys("weights/")) == ["weights/v0", "weights/v1", "weights/v2"]
    run(store.delete("weights/v0"))
    assert run(store.keys()) == ["other", "weights/v1", "weights/v2"]
    assert run(store.get_state_dict("weights/v2"))["w"].tolist() == [2.0, 2.0]
    with pytest.raises(KeyError):
        run(store.delete("weights/v0"))
    with pytest.raises(ValueError, match=">= 0"):
        weights_key(-1)


def test_replacing_a_key_returns_the_new_value(store, run):
    run(store.put_state_dict({"a": torch.zeros(3), "b": torch.zeros(2)}, "latest"))
    run(store.put_state_dict({"c": torch.ones(5)}, "latest"))  # other names, other shapes
    out = run(store.get_state_dict("latest"))
    assert list(out) == ["c"] and out["c"].tolist() == [1.0] * 5
    assert run(store.keys()) == ["latest"]


def test_readers_never_see_torn_versions(store, run):
    """A writer publishes versions (every tensor filled with v) while two readers read the latest."""
    n = 50_000

    async def scenario() -> list[str]:
        errors: list[str] = []
        done = asyncio.Event()

        async def writer() -> None:
            for v in range(1, 16):
                await store.put_state_dict({"a": torch.full((n,), float(v)), "b": torch.full((n,), float(v))},
                                           "latest")
            done.set()

        async def reader() -> int:
            reads = 0
            while not done.is_set():
                sd = await store.get_state_dict("latest")
                values = torch.cat([sd["a"], sd["b"]]).unique()
                if values.numel() != 1:
                    errors.append(f"torn read: {values[:5].tolist()}")
                reads += 1
            return reads

        await store.put_state_dict({"a": torch.zeros(n), "b": torch.zeros(n)}, "latest")
        _, reads_1, reads_2 = await asyncio.gather(writer(), reader(), reader())
        assert reads_1 + reads_2 > 2, "readers never overlapped the writer"
        return errors

    errors = run(scenario())
    assert not errors, errors[:3]
    assert run(store.get_state_dict("latest"))["a"][0].item() == 15.0
