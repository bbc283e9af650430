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
import time
from pathlib import Path
from typing import Any

from actors.common import load_tokenizer
from actors.reward import RewardActor
from forge_kernels.config import ConfigError, run_app, run_to_exit
from forge_kernels.env.base import Environment, build_environment
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.rollout import EnvTurnFeedback
from forge_kernels.runtime import ActorCallError, ActorDiedError, RuntimeConfig, shutdown, spawn

from apps.eval.config import EvalAppConfig
from apps.eval.output import build_report, format_table, plot_turns, write_report
from apps.eval.policy import GeneratorPolicy, Policy, SolutionsPolicy, resolve_model_path
from apps.eval.rollout import EvalRun, episode_fn, run_all

__all__ = ["EvalFailed", "main", "run"]

class EvalFailed(RuntimeError):
    """Sampling or scoring failed; the evaluation was stopped."""


def load_env_tasks(cfg: EvalAppConfig) -> tuple[Environment, list[Any]]:
    """The environment (not set up: tasks, prompts and feedback need no evaluator) and its tasks."""
    env = build_environment(cfg.env)
    try:
        tasks = list(env.load_tasks())
    except (ValueError, OSError) as err:
        raise ConfigError(f"env.config.tasks: {err}") from None
    if not tasks:
        raise ConfigError(f"env {cfg.env.name!r} with config {cfg.env.config} gives no task")
    return env, tasks


async def start_policy(cfg: EvalAppConfig, env: Environment,
                       tasks: list[Any]) -> tuple[Policy, dict[str, list[int]], EnvTurnFeedback | None]:
    """The policy, each task's first-prompt ids, and (generator policies) the turn feedback renderer."""
    if cfg.policy.source == "solutions":  # no tokenizer: the answer does not depend on the prompt
        return SolutionsPolicy(tasks), {t.name: [] for t in tasks}, None
    model_path = resolve_model_path(cfg, env, tasks)
    conversation = ConversationTokens(load_tokenizer(model_path))
    prompts = {t.name: conversation.initial_ids(env.initial_messages(t)) for t in tasks}
    return await GeneratorPolicy.start(cfg, model_path), prompts, EnvTurnFeedback(env, conversation)


async def run(cfg: EvalAppConfig) -> dict[str, Any]:
    """Sample, score and write the outputs; returns the report (also written to ``output.report``)."""
    start = time.monotonic()
    env, tasks = load_env_tasks(cfg)
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    evaluated = EvalRun()
    policy: Policy | None = None
    reward: Any = None
    try:
        policy, prompts, feedback = await start_policy(cfg, env, tasks)
        reward = await spawn(RewardActor, {"env": cfg.env.model_dump(), "max_concurrency": cfg.eval_concurrency},
                             RuntimeConfig(backend="local"))
        episodes = episode_fn(cfg, policy, reward, feedback, evaluated)  # solutions: single-turn, no feedback
        await run_all(tasks, prompts, cfg.samples_per_task, episodes, evaluated, cfg.max_concurrent_tasks)
    except (ActorCallError, ActorDiedError) as err:
        raise EvalFailed(f"evaluation stopped: {err}") from err
    finally:
        with contextlib.suppress(Exception):  # already dead or never started: shutdown still cleans up
            if policy is not None:
                await policy.close()
            if reward is not None:
                await asyncio.wait_for(reward.close.one(), 30)
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
    report = run_to_exit(run(cfg), EvalFailed)
    print(format_table(report))
    print(f"\nreport: {report['report_path']}" + (f"\nplot:   {report['plot_path']}" if report["plot_path"] else ""))
    return report


if __name__ == "__main__":
    run_app(EvalAppConfig, main, description=__doc__)
