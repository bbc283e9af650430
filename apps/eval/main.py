"""Evaluate a policy on kernel tasks: k samples per task, scored by the evaluator.

    python -m apps.eval.main --config configs/eval_tiny.yaml
    python -m apps.eval.main --config configs/eval_tiny.yaml policy.path=runs/sft/final samples_per_task=8
    python -m apps.eval.main --config configs/eval_gpu.yaml

Writes a JSON report and per-turn curves (PNG) under ``run_dir`` and prints a table. See
docs/eval_app.md for the metrics (pass@k, fast_p, geomean speedup) and how they are aggregated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any

from actors.reward import RewardActor
from forge_kernels.config import ConfigError, run_app
from forge_kernels.runtime import ActorCallError, ActorDiedError, RuntimeConfig, shutdown, spawn
from forge_kernels.tasks import load_tasks

from apps.eval.config import EvalAppConfig
from apps.eval.output import build_report, format_table, plot_turns, write_report
from apps.eval.policy import Policy, build_policy
from apps.eval.rollout import EvalRun, run_episodes, single_turn_episodes

__all__ = ["EvalFailed", "main", "run"]

log = logging.getLogger("apps.eval")


class EvalFailed(RuntimeError):
    """Sampling or scoring failed; the evaluation was stopped."""


async def run(cfg: EvalAppConfig) -> dict[str, Any]:
    """Sample, score and write the outputs; returns the report (also written to ``output.report``)."""
    start = time.monotonic()
    try:
        tasks = load_tasks(cfg.tasks)
    except (ValueError, OSError) as err:
        raise ConfigError(f"tasks: {err}") from None
    if not tasks:
        raise ConfigError(f"tasks: {cfg.tasks.model_dump(mode='json')} selects no task")
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    policy: Policy | None = None
    reward: Any = None
    try:
        policy, prompts = await build_policy(cfg, tasks)
        reward = await spawn(RewardActor, cfg.reward.model_dump(), RuntimeConfig(backend="local"))
        evaluated = EvalRun()
        episode_fn = single_turn_episodes(policy, reward, evaluated)
        await run_episodes(tasks, prompts, cfg.samples_per_task, episode_fn, evaluated, cfg.max_concurrent_tasks)
    except (ActorCallError, ActorDiedError) as err:
        raise EvalFailed(f"evaluation stopped: {err}") from err
    finally:
        with contextlib.suppress(Exception):  # already dead or never started: shutdown still cleans up
            if policy is not None:
                await policy.close()
            if reward is not None:
                await asyncio.wait_for(reward.close.call_one(), 30)
        await shutdown()
    report = build_report(cfg, evaluated, policy.name, time.monotonic() - start)
    report["report_path"] = str(write_report(cfg, report))
    plot = plot_turns(cfg, report)
    report["plot_path"] = None if plot is None else str(plot)
    return report


def main(cfg: EvalAppConfig) -> dict[str, Any]:
    """Entry point: run, print the table, turn failures into clear messages and exit codes."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if cfg.torch_threads is not None:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    try:
        report = asyncio.run(run(cfg))
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except EvalFailed as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    print(format_table(report))
    print(f"\nreport: {report['report_path']}" + (f"\nplot:   {report['plot_path']}" if report["plot_path"] else ""))
    return report


if __name__ == "__main__":
    run_app(EvalAppConfig, main, description=__doc__)
