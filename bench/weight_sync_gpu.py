"""GPU weight sync benchmark: a real-shape state dict from a trainer process to a generator process.

    python -m bench.weight_sync_gpu [--model qwen3-1.7b qwen3-8b] [--transport cuda_ipc shm]
        [--trainer-device 0] [--generator-device 1] [--versions 3]

Prints one JSON line per (model, transport): ``{"bench": "weight_sync", "device": ...,
"transport": ..., "model": ..., "params": ..., "gb": ..., "push_s": ..., "pull_s": ...,
"push_to_loaded_s": ..., "gbps": ...}``.

The trainer process holds the model's parameters (random bf16, the architecture's real shapes
from :mod:`forge_kernels.models.real_shapes`) on its GPU and publishes version v, deleting v-2 as
the trainer actor does; the generator process, on its own GPU, copies each version into its own
preallocated parameters (``get_state_dict(user_state_dict=...)``), as a generator engine does.
``push_to_loaded_s`` is the median time from the start of a push to the generator's weights being
complete (push then pull, back to back), and ``gbps`` the weight bytes over that time; the first
version (cold: segments allocated) is excluded. ``cuda_ipc`` goes device to device; ``shm`` is
the host shared-memory path (device -> pageable host -> device) for comparison.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
import uuid

import torch

from forge_kernels.models.real_shapes import parameter_count, real_shape_config
from forge_kernels.store import StoreConfig, build_store, weights_key


def _shapes(model: str) -> dict[str, tuple[list[int], torch.dtype]]:
    from transformers import Qwen3ForCausalLM

    with torch.device("meta"):
        m = Qwen3ForCausalLM(real_shape_config(model, 0, 1))
    return {k: (list(v.shape), torch.bfloat16) for k, v in m.state_dict().items()}


def _generator(cfg: dict, model: str, device: int, requests: mp.Queue, replies: mp.Queue) -> None:
    torch.cuda.set_device(device)
    store = build_store(StoreConfig(**cfg))
    params = {k: torch.empty(shape, dtype=dtype, device=device) for k, (shape, dtype) in _shapes(model).items()}
    replies.put("ready")
    while (key := requests.get()) is not None:
        start = time.perf_counter()
        store.get_state_dict_sync(key, params)
        torch.cuda.synchronize()
        replies.put((time.perf_counter() - start, float(next(iter(params.values())).float().sum())))
    store.close_sync()


def run(model: str, transport: str, trainer_device: int, generator_device: int, versions: int) -> dict:
    root = tempfile.mkdtemp(prefix="wsync-", dir="/dev/shm")
    cfg = {"backend": transport, "namespace": f"b{uuid.uuid4().hex[:8]}", "root": root}
    torch.cuda.set_device(trainer_device)
    g = torch.Generator(device=f"cuda:{trainer_device}").manual_seed(0)
    params = {k: torch.randn(shape, generator=g, device=trainer_device).to(dtype)
              for k, (shape, dtype) in _shapes(model).items()}
    nbytes = sum(t.numel() * t.element_size() for t in params.values())
    ctx = mp.get_context("spawn")
    requests, replies = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_generator, args=(cfg, model, generator_device, requests, replies), daemon=True)
    proc.start()
    assert replies.get(timeout=600) == "ready"
    store = build_store(StoreConfig(**cfg))
    pushes, pulls, totals = [], [], []
    try:
        for v in range(versions + 1):
            first = next(iter(params.values()))
            first.add_(1)  # a "training step": each version differs
            torch.cuda.synchronize()
            start = time.perf_counter()
            store.put_state_dict_sync(params, weights_key(v))
            pushed = time.perf_counter()
            requests.put(weights_key(v))
            pull_s, checksum = replies.get(timeout=600)
            total = time.perf_counter() - start
            expected = float(first.float().sum())
            if abs(checksum - expected) > 1e-3 * max(1.0, abs(expected)):
                raise RuntimeError(f"version {v}: generator read checksum {checksum}, trainer has {expected}")
            if v >= 2:
                store.delete_sync(weights_key(v - 2))
            if v > 0:  # version 0 allocates the segments (cold)
                pushes.append(pushed - start)
                pulls.append(pull_s)
                totals.append(total)
    finally:
        requests.put(None)
        proc.join(timeout=120)
        store.close_sync(unlink=True)
    total = statistics.median(totals)
    return {"bench": "weight_sync", "device": torch.cuda.get_device_name(trainer_device),
            "transport": transport, "model": model, "params": parameter_count(model),
            "trainer_device": trainer_device, "generator_device": generator_device,
            "gb": round(nbytes / 1e9, 3), "push_s": round(statistics.median(pushes), 4),
            "pull_s": round(statistics.median(pulls), 4), "push_to_loaded_s": round(total, 4),
            "gbps": round(nbytes / 1e9 / total, 1), "versions": versions}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", nargs="+", default=["qwen3-1.7b", "qwen3-8b"])
    p.add_argument("--transport", nargs="+", default=["cuda_ipc", "shm"], choices=["cuda_ipc", "shm"])
    p.add_argument("--trainer-device", type=int, default=0)
    p.add_argument("--generator-device", type=int, default=None,
                   help="default: 1 when the machine has two GPUs, else 0")
    p.add_argument("--versions", type=int, default=3)
    args = p.parse_args()
    gen = args.generator_device
    if gen is None:
        gen = 1 if torch.cuda.device_count() > 1 else 0
    for model in args.model:
        for transport in args.transport:
            try:
                row = run(model, transport, args.trainer_device, gen, args.versions)
            except Exception as e:  # one row failing (e.g. /dev/shm too small) must not hide the others
                row = {"bench": "weight_sync", "transport": transport, "model": model, "error": repr(e)[:300]}
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
