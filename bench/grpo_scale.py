"""GRPO at real size: run the GRPO app with a scale config and summarise it in one JSON line.

    python -m bench.grpo_scale --config configs/grpo_scale_x2.yaml [key=value ...]

Prints ``{"bench": "grpo_scale", "model": ..., "params": ..., "gpus": n, "steps": n,
"step_s_median": ..., "gen_tokens_per_s": ..., "train_tokens_per_s": ..., "weight_sync_s": ...,
"peak_gpu_gib": [...], "staleness_max": ..., "breakdown_s": {...}}``. The breakdown is the median
per step of the app's own timings: ``generate`` (one generate call: a group), ``score`` (one
environment step), ``train`` (one optimiser step), ``push`` (trainer -> store) and ``load``
(generator drains, reads the store and loads). Steps after the first are counted (the first pays
compilation and allocation). Peak GPU memory is read per device at the end (the local runtime
backend runs every actor in this process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from typing import Any

import torch

from apps.grpo.config import GRPOConfig
from apps.grpo.main import run
from forge_kernels.config import load_config
from forge_kernels.models.real_shapes import parameter_count


def _median(rows: list[dict[str, float]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return round(statistics.median(values), 4) if values else None


def summarise(cfg: GRPOConfig, rows: list[dict[str, float]]) -> dict[str, Any]:
    """The bench line from the app's per-step metric rows."""
    steady = rows[1:] or rows
    push, load = _median(steady, "perf/weight_push_s/mean"), _median(steady, "perf/weight_load_s/mean")
    train_s, tokens = _median(steady, "perf/train_step_s/mean"), _median(steady, "train/tokens/mean")
    return {
        "bench": "grpo_scale", "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "model": cfg.model.random_init or cfg.model.path or "tiny",
        "params": parameter_count(cfg.model.random_init) if cfg.model.random_init else None,
        "gpus": torch.cuda.device_count(), "mode": cfg.mode, "steps": len(rows),
        "step_s_median": _median(steady, "perf/step_s/mean"),
        "gen_tokens_per_s": _median(steady, "perf/gen_tokens_per_s/mean"),
        "train_tokens_per_s": round(tokens / train_s, 1) if tokens and train_s else None,
        "weight_sync_s": round(push + load, 4) if push is not None and load is not None else None,
        "peak_gpu_gib": [round(torch.cuda.max_memory_allocated(i) / 2**30, 2) for i in range(torch.cuda.device_count())],
        "staleness_max": max((r.get("train/staleness_max/max", 0.0) for r in rows), default=None),
        "breakdown_s": {"generate": _median(steady, "perf/generate_s/mean"), "score": _median(steady, "env/step_s/mean"),
                        "train": train_s, "push": push, "load": load},
        "correct_mean": _median(steady, "reward/correct/mean"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = p.parse_args()
    cfg = load_config(GRPOConfig, args.config, args.overrides)
    rows = asyncio.run(run(cfg))
    print(json.dumps(summarise(cfg, rows)), flush=True)


if __name__ == "__main__":
    main()
