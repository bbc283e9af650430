"""Weight sync benchmark: push and pull a ~1 GB state dict through the tensor store.

    python -m bench.weight_sync [--gb 1.0] [--tensors 16]

Prints one JSON line: steady-state push (trainer -> store) and pull (store -> generator's own
tensors) times and GB/s, the first (cold) push, and this machine's memcpy bandwidth measured the
same way (``torch.Tensor.copy_`` between preallocated buffers), with each as a fraction of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
import uuid

import torch

from forge_kernels.store import ShmTensorStore, weights_key


def _timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    numel = int(args.gb * 1e9 / 4 / args.tensors)
    state = {f"layers.{i}.weight": torch.randn(numel) for i in range(args.tensors)}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    gb = nbytes / 1e9

    src, dst = torch.cat(list(state.values())), torch.empty(numel * args.tensors)
    dst.copy_(src)  # touch the destination pages first
    memcpy_s = _timed(lambda: dst.copy_(src), args.repeats)
    del src, dst

    store = ShmTensorStore(f"bench-{uuid.uuid4().hex[:8]}")
    version = 0

    def push() -> None:
        nonlocal version
        store.put_state_dict_sync(state, weights_key(version))
        if version >= 2:
            store.delete_sync(weights_key(version - 2))
        version += 1

    try:
        start = time.perf_counter()
        push()
        cold_push_s = time.perf_counter() - start
        push()  # second segment (also cold); every later push reuses a warm one
        push_s = _timed(push, args.repeats)
        target = {k: torch.empty_like(v) for k, v in state.items()}
        latest = weights_key(version - 1)
        store.get_state_dict_sync(latest, target)  # touch the destination pages
        pull_s = _timed(lambda: store.get_state_dict_sync(latest, target), args.repeats)
        assert all(torch.equal(target[k], state[k]) for k in state)
        segments = store.segment_count()
    finally:
        store.close_sync(unlink=True)

    memcpy_gbps = gb / memcpy_s
    print(json.dumps({
        "bench": "weight_sync",
        "backend": "shm",
        "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
        "state_dict_gb": round(gb, 3),
        "tensors": args.tensors,
        "push_s": round(push_s, 4),
        "push_gbps": round(gb / push_s, 2),
        "pull_s": round(pull_s, 4),
        "pull_gbps": round(gb / pull_s, 2),
        "cold_push_s": round(cold_push_s, 4),
        "memcpy_gbps": round(memcpy_gbps, 2),
        "push_fraction_of_memcpy": round(gb / push_s / memcpy_gbps, 3),
        "pull_fraction_of_memcpy": round(gb / pull_s / memcpy_gbps, 3),
        "segments": segments,
    }))


if __name__ == "__main__":
    main()
