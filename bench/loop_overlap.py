"""Steps per second of the GRPO app in async mode (overlapped loops) vs sync mode (generate, then train).

Runs the real app (configs/grpo_tiny.yaml: built-in tasks, the tiny model, the real reward actor;
a random tiny model writes no kernel, so evaluation costs nothing and generation and training
dominate), sized so generation and training take comparable time. Each actor's torch uses one
thread, so sync mode keeps one core busy at a time while async mode can use two. The first step
(start-up) is excluded. Prints one JSON line.

    python -m bench.loop_overlap [--steps 16] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import uuid
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from apps.grpo.config import GRPOConfig  # noqa: E402
from apps.grpo.main import run  # noqa: E402
from forge_kernels.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def measure(mode: str, args: argparse.Namespace, tmp: str) -> dict[str, float]:
    base = "grpo_tiny_monarch.yaml" if args.backend == "monarch" else "grpo_tiny.yaml"
    cfg = load_config(GRPOConfig, ROOT / "configs" / base, [
        f"mode={mode}", f"steps={args.steps}", f"run_dir={tmp}/{mode}", f"store.namespace=b{uuid.uuid4().hex[:8]}",
        f"generator.sampling.max_tokens={args.max_tokens}", f"rollout.group_size={args.group_size}",
        f"rollout.groups_per_step={args.groups_per_step}", f"rollout.loops={args.loops}",
        "model.tiny={hidden_size: 128, intermediate_size: 256, num_hidden_layers: 2, num_attention_heads: 2}",
        "buffer.max_policy_age=1", "metrics.backends=[]", "generator.torch_threads=1", "trainer.torch_threads=1",
    ])
    torch.set_num_threads(1)  # local backend: actors share this process; each torch op uses one core
    history = asyncio.run(run(cfg))
    step_s = [h["perf/step_s/mean"] for h in history[1:]]
    return {"steps_per_s": len(step_s) / sum(step_s), "staleness_max": max(h["train/staleness_max/max"] for h in history)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--loops", type=int, default=2)
    parser.add_argument("--backend", choices=["monarch", "local"], default="monarch",
                        help="monarch: generator, trainer, reward in own processes (no shared GIL)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sync = measure("sync", args, tmp)
        overlapped = measure("async", args, tmp)
    print(json.dumps({
        "bench": "loop_overlap",
        "sync_steps_per_s": round(sync["steps_per_s"], 3),
        "async_steps_per_s": round(overlapped["steps_per_s"], 3),
        "speedup": round(overlapped["steps_per_s"] / sync["steps_per_s"], 3),
        "target": 1.8,
        "async_staleness_max": overlapped["staleness_max"],
        "steps": args.steps, "max_tokens": args.max_tokens, "group_size": args.group_size,
        "groups_per_step": args.groups_per_step, "rollout_loops": args.loops,
        "backend": args.backend, "cpu_cores": os.cpu_count(), "machine": platform.machine(), "torch_threads_per_actor": 1,
    }))


if __name__ == "__main__":
    main()
