"""Weight sync benchmark: push and pull a state dict through a tensor store; load it into vLLM.

    python -m bench.weight_sync [--backend shm|torchstore] [--gb 1.0] [--tensors 16]
    <vllm venv>/bin/python -m bench.weight_sync --vllm [--backend shm|torchstore] [--hidden 512]

Prints one JSON line.

Store mode (default): steady-state push (trainer -> store, deleting version v-2 as a trainer
does) and pull (store -> the generator's own tensors) times and GB/s, the first (cold) push, and
this machine's memcpy bandwidth measured the same way (``torch.Tensor.copy_`` between
preallocated buffers), with each as a fraction of it. With ``torchstore`` the store's storage
volume runs in its own Monarch process (as in an app), so every push and pull crosses processes.

vLLM mode (``--vllm``, needs vLLM: run it with the vLLM venv's python): a tiny Qwen3 of the
given size is pushed to the store and loaded into a running vLLM engine (``update_weights``:
drain, workers read the tensors, ``reload_weights``, prefix-cache reset); median of 3 versions.
vLLM's workers run in processes vLLM spawns, outside the Monarch world, so they read only the
shm store: with ``torchstore`` the generator process pulls the version from torchstore and
relays it into the host's shm store, and the row reports both parts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import torch

from forge_kernels.store import ShmTensorStore, StoreConfig, build_store, weights_key


async def _timed(fn: Callable[[], Awaitable[Any]], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _memcpy_s(state: dict[str, torch.Tensor], repeats: int) -> float:
    src = torch.cat([t.flatten() for t in state.values()])
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the destination pages first
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _open_store(backend: str) -> Any:
    cfg = StoreConfig(backend=backend, namespace=f"bench{uuid.uuid4().hex[:8]}")
    store = build_store(cfg)
    await store.initialize()  # torchstore: spawns the storage volume process and the controller
    return store


async def _close_store(store: Any) -> None:
    if isinstance(store, ShmTensorStore):
        store.close_sync(unlink=True)
    else:
        await store.close()


async def bench_store(backend: str, gb: float, tensors: int, repeats: int) -> dict[str, Any]:
    """Push/pull times of a ``gb`` GB fp32 state dict of ``tensors`` tensors."""
    numel = int(gb * 1e9 / 4 / tensors)
    state = {f"layers.{i}.weight": torch.randn(numel) for i in range(tensors)}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    size_gb = nbytes / 1e9
    memcpy_gbps = size_gb / _memcpy_s(state, repeats)

    store = await _open_store(backend)
    version = 0

    async def push() -> None:
        nonlocal version
        await store.put_state_dict(state, weights_key(version))
        if version >= 2:
            await store.delete(weights_key(version - 2))
        version += 1

    try:
        start = time.perf_counter()
        await push()
        cold_push_s = time.perf_counter() - start
        await push()  # shm: second segment (also cold); every later push reuses a warm one
        push_s = await _timed(push, repeats)
        target = {k: torch.empty_like(v) for k, v in state.items()}
        latest = weights_key(version - 1)
        await store.get_state_dict(latest, target)  # touch the destination pages
        pull_s = await _timed(lambda: store.get_state_dict(latest, target), repeats)
        if not all(torch.equal(target[k], state[k]) for k in state):
            raise RuntimeError(f"{backend} store returned different tensors than were pushed")
        extra = {"segments": store.segment_count()} if isinstance(store, ShmTensorStore) else {}
    finally:
        await _close_store(store)
    return {
        "state_dict_gb": round(size_gb, 3), "tensors": tensors,
        "push_s": round(push_s, 4), "push_gbps": round(size_gb / push_s, 2),
        "pull_s": round(pull_s, 4), "pull_gbps": round(size_gb / pull_s, 2),
        "cold_push_s": round(cold_push_s, 4), "memcpy_gbps": round(memcpy_gbps, 2),
        "push_fraction_of_memcpy": round(size_gb / push_s / memcpy_gbps, 3),
        "pull_fraction_of_memcpy": round(size_gb / pull_s / memcpy_gbps, 3),
        **extra,
    }


async def bench_vllm_load(backend: str, hidden: int, layers: int) -> dict[str, Any]:
    """Median time for a running vLLM engine to load a pushed version of a tiny Qwen3."""
    from actors.engines.vllm_engine import VLLMEngineConfig, VLLMGenerationEngine
    from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer

    tokenizer = train_tokenizer(["def kernel(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"] * 50,
                                vocab_size=512)
    model = build_tiny_model(TinyModelConfig(
        hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 256)), tokenizer).eval()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    weights_mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint(model, tokenizer, f"{tmp}/ckpt")
        shm_cfg = StoreConfig(namespace=f"bench{uuid.uuid4().hex[:8]}")  # /dev/shm, as in an app
        shm = build_store(shm_cfg)
        source = shm if backend == "shm" else await _open_store(backend)
        engine = VLLMGenerationEngine(str(path), "float32", VLLMEngineConfig(max_model_len=512, kv_cache_gib=0.25),
                                      store=shm_cfg)
        rows: dict[str, list[float]] = {"push_s": [], "pull_s": [], "relay_s": [], "load_s": [], "total_s": []}
        try:
            for version in (1, 2, 3):
                for t in state.values():
                    t.add_(0.01)  # a new version really differs
                start = time.perf_counter()
                await source.put_state_dict(state, weights_key(version))
                pushed = time.perf_counter()
                if source is not shm:  # generator side: torchstore -> this host's shm store
                    pulled_state = await source.get_state_dict(weights_key(version))
                    pulled = time.perf_counter()
                    await shm.put_state_dict(pulled_state, weights_key(version))
                    relayed = time.perf_counter()
                    rows["pull_s"].append(pulled - pushed)
                    rows["relay_s"].append(relayed - pulled)
                await engine.update_weights(version)
                rows["push_s"].append(pushed - start)
                rows["load_s"].append(engine.last_load_s)
                rows["total_s"].append(time.perf_counter() - start)
                if version >= 3:
                    await shm.delete(weights_key(version - 2))
        finally:
            await engine.close()
            if source is not shm:
                await _close_store(source)
            shm.close_sync(unlink=True)
    return {"vllm_weights_mb": round(weights_mb, 1), "vllm_engine_start_s": round(engine.start_s, 2),
            **{f"vllm_{k}": round(statistics.median(v), 4) for k, v in rows.items() if v}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["shm", "torchstore"], default="shm")
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vllm", action="store_true", help="measure the vLLM engine's weight load instead")
    parser.add_argument("--hidden", type=int, default=512, help="--vllm: tiny Qwen3 hidden size")
    parser.add_argument("--layers", type=int, default=4, help="--vllm: tiny Qwen3 layers")
    args = parser.parse_args()
    if args.vllm:
        result = asyncio.run(bench_vllm_load(args.backend, args.hidden, args.layers))
    else:
        result = asyncio.run(bench_store(args.backend, args.gb, args.tensors, args.repeats))
    print(json.dumps({
        "bench": "weight_sync", "backend": args.backend,
        "machine": f"{platform.machine()} {torch.get_num_threads()} threads", **result,
    }))


if __name__ == "__main__":
    main()
