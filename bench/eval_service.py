"""Throughput and latency of the eval service, end to end over HTTP.

    python -m bench.eval_service [--devices cpu|0|0,1] [--workers 2] [--concurrency 8] [--requests 32]
                                 [--trivial level1/relu] [--realistic level2/add_layernorm] [--url URL]

Starts a server (``LocalEvalServer``; or uses ``--url``), warms each task once (reference outputs
are cached per task, as in training), then sends ``--requests`` distinct candidates (the task's
built-in solution with a distinct trailing comment, so no request is a result-cache hit; the seed
is fixed, so the reference is reused as in training) with ``--concurrency``
requests in flight through ``EvalClient``. Prints one JSON line: evaluations per minute and
client-side p50/p95 latency for a trivial and a realistic task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from typing import Any

from forge_kernels.eval import EvalOptions
from forge_kernels.eval.service import EvalClient, LocalEvalServer
from forge_kernels.eval.service.models import builtin_tasks


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def _measure(client: EvalClient, task_name: str, requests: int, concurrency: int,
                   options: EvalOptions) -> dict[str, Any]:
    task = builtin_tasks()[task_name]
    assert task.solution is not None
    warm = await client.evaluate(task, task.solution + "\n# warm-up\n", options)
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> str:
        async with gate:
            start = time.monotonic()
            result = await client.evaluate(task, task.solution + f"\n# candidate {i}\n", options)
            latencies.append(time.monotonic() - start)
            if result.fault.value == "internal_error":
                print(f"{task_name} candidate {i}: {result.error}", file=sys.stderr)
            return result.fault.value

    start = time.monotonic()
    faults = await asyncio.gather(*(one(i) for i in range(requests)))
    wall = time.monotonic() - start
    return {"task": task_name, "requests": requests, "faults": dict(Counter(faults)), "warm_correct": warm.correct,
            "device": warm.device, "timed": warm.timing_available, "wall_s": round(wall, 2),
            "evals_per_min": round(requests / wall * 60, 1), "p50_s": round(statistics.median(latencies), 3),
            "p95_s": round(_percentile(latencies, 0.95), 3)}


async def _run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    options = EvalOptions()
    async with EvalClient(url, max_connections=max(8, args.concurrency)) as client:
        trivial = await _measure(client, args.trivial, args.requests, args.concurrency, options)
        realistic = await _measure(client, args.realistic, args.requests, args.concurrency, options)
    return {"trivial": trivial, "realistic": realistic}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="cpu", help="'cpu' or GPU indices '0,1'")
    parser.add_argument("--workers", type=int, default=2, help="CPU workers (devices=cpu)")
    parser.add_argument("--worker-concurrency", type=int, default=None, help="evaluations per worker at once")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--requests", type=int, default=32, help="timed requests per task")
    parser.add_argument("--trivial", default="level1/relu")
    parser.add_argument("--realistic", default="level2/add_layernorm")
    parser.add_argument("--url", default=None, help="measure a running server instead of starting one")
    args = parser.parse_args()
    settings: dict[str, Any] = {}
    if args.worker_concurrency:
        settings["concurrency"] = args.worker_concurrency
    started = time.monotonic()
    if args.url:
        url, startup = args.url, None
        measured = asyncio.run(_run(args, url))
    else:
        with LocalEvalServer(devices=args.devices, workers=args.workers, startup_timeout_s=600, **settings) as srv:
            startup = round(time.monotonic() - started, 1)
            measured = asyncio.run(_run(args, srv.url))
    print(json.dumps({
        "bench": "eval_service", "machine": f"{platform.machine()} {os.cpu_count()} threads",
        "devices": args.devices, "workers": args.workers if args.devices == "cpu" else None,
        "concurrency": args.concurrency, "server_startup_s": startup, **measured,
    }))


if __name__ == "__main__":
    main()
