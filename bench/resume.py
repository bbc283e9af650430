"""Checkpoint and resume costs of the GRPO app on the tiny CPU model.

    python -m bench.resume [--steps 6]

Runs ``configs/grpo_tiny.yaml`` in sync mode with a checkpoint after every step, then resumes a
longer run from its last checkpoint. Prints one JSON line: checkpoint save time (median) and
size, step time (median), checkpoint overhead as a fraction of step time, and the time from the
resumed run's start to its first new step (actors spawned, state restored, weights pushed, one
step trained).
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
from pathlib import Path

from apps.grpo.config import GRPOConfig
from apps.grpo.main import run
from forge_kernels.config import load_config


def _cfg(root: Path, steps: int) -> GRPOConfig:
    return load_config(GRPOConfig, "configs/grpo_tiny.yaml", [
        f"run_dir={root}/run", f"store.root={root}/shm", f"store.namespace=b{uuid.uuid4().hex[:8]}",
        "mode=sync", f"steps={steps}", "checkpoint.interval=1", "metrics.backends=[{type: jsonl, path: "
        f"{root}/metrics.jsonl" + "}]"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = asyncio.run(run(_cfg(root, args.steps)))
        saves = [r["perf/checkpoint_s/mean"] for r in rows if "perf/checkpoint_s/mean" in r]
        steps = [r["perf/step_s/mean"] for r in rows[1:]]
        latest = sorted((root / "run" / "checkpoints").glob("step-*"))[-1]
        size = sum(f.stat().st_size for f in latest.iterdir())
        start = time.time()
        asyncio.run(run(_cfg(root, args.steps + 1)))
        first_new = json.loads((root / "metrics.jsonl").read_text().splitlines()[-1])["time"]
    save_s, step_s = statistics.median(saves), statistics.median(steps)
    print(json.dumps({"bench": "resume", "machine": f"{platform.machine()} {__import__('os').cpu_count()} cpus",
                      "model": "tiny (configs/grpo_tiny.yaml)", "checkpoint_save_s": round(save_s, 4),
                      "checkpoint_mb": round(size / 1e6, 3), "step_s": round(step_s, 4),
                      "checkpoint_overhead": round(save_s / step_s, 3),
                      "restart_to_first_new_step_s": round(first_new - start, 2)}), flush=True)


if __name__ == "__main__":
    main()
