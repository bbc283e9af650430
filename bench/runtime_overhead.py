"""Round-trip latency of runtime calls, per backend: ``python -m bench.runtime_overhead``.

Prints one JSON line: the median latency (µs) of an empty ``call_one`` and of a ``call_one``
carrying a 1 MiB float32 tensor argument (the actor returns None), for the local and monarch
backends, measured sequentially from one caller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time

import torch

from forge_kernels.runtime import Actor, endpoint, shutdown, spawn


class Echo(Actor):
    """The smallest possible actor: its endpoints do no work."""

    @endpoint
    async def empty(self) -> None:
        return None

    @endpoint
    async def take(self, tensor: torch.Tensor) -> None:
        return None


async def _median_us(call, iterations: int, warmup: int) -> float:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


async def measure(backend: str, iterations: int) -> dict[str, float]:
    mesh = await spawn(Echo, backend=backend)
    tensor = torch.randn(256 * 1024)  # 1 MiB of float32
    try:
        empty = await _median_us(mesh.empty.call_one, iterations, warmup=iterations // 10 + 5)
        mib = await _median_us(lambda: mesh.take.call_one(tensor), iterations // 4 + 1,
                               warmup=iterations // 40 + 3)
    finally:
        await mesh.stop()
    return {"empty_call_us": round(empty, 1), "tensor_1mib_call_us": round(mib, 1)}


async def main(backends: list[str], iterations: int) -> dict[str, object]:
    result: dict[str, object] = {
        "bench": "runtime_overhead",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "iterations": iterations,
    }
    try:
        for backend in backends:
            result[backend] = await measure(backend, iterations)
    finally:
        await shutdown()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", nargs="+", default=["local", "monarch"],
                        choices=["local", "monarch"])
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.backends, args.iterations))))
