"""Multi-turn pass rates of checkpoints on an environment's tasks: turn 1 (single-turn), per turn,
and best over turns, optionally with STTS context management.

For each ``--checkpoint``, ``--samples`` episodes per task run up to ``--turns`` turns (the
evaluator's feedback opens each next turn; an episode stops once its kernel is correct), through
:func:`forge_kernels.rollout.run_episodes` with the transformers engine in this process.
The environment, sampling and tasks come from a GRPO config (``--config``), so the prompts match
training. Prints one JSON line: per checkpoint, :func:`forge_kernels.rollout.turn_summary`
(``turn/1/correct`` is the single-turn pass rate, ``best/correct`` the best over turns).

    python -m bench.multiturn_passrate --config configs/grpo_demo_multiturn.yaml \\
        --checkpoint runs/demo/sft_multiturn runs/demo/grpo_multiturn/final --turns 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU here: interpret Triton (before torch imports it)

import torch  # noqa: E402

from actors.common import load_model, load_tokenizer  # noqa: E402
from actors.engines.hf_generation import HFGenerationEngine  # noqa: E402
from apps.grpo.config import GRPOConfig  # noqa: E402
from forge_kernels.config import load_config  # noqa: E402
from forge_kernels.env.base import build_environment  # noqa: E402
from forge_kernels.env.conversation import ConversationTokens  # noqa: E402
from forge_kernels.rollout import (  # noqa: E402
    LocalTurnBackend,
    STTSContext,
    TurnsConfig,
    full_context,
    run_episodes,
    turn_summary,
)


async def measure(cfg: GRPOConfig, checkpoint: str, turns: TurnsConfig, samples: int, stts_window: int | None) -> dict:
    tokenizer = load_tokenizer(checkpoint)
    engine = HFGenerationEngine(load_model(checkpoint), tokenizer)
    sampling = cfg.generator.sampling

    async def generate(prompts: list[list[int]], n: int):
        return await asyncio.to_thread(engine.generate, prompts, n, sampling)

    env = build_environment(cfg.env)
    await env.setup()
    try:
        backend = LocalTurnBackend.for_environment(generate, env, ConversationTokens(tokenizer))
        context = full_context if stts_window is None else STTSContext(stts_window)
        start = time.perf_counter()
        groups = await asyncio.gather(*(
            run_episodes(task, backend.initial_ids(task), samples, backend, turns, group_id=task.name,
                         response_tokens=sampling.max_tokens, context=context)
            for task in env.load_tasks()))
        wall = time.perf_counter() - start
    finally:
        await env.close()
    episodes = [ep for g in groups for ep in g]
    summary = {k: round(v, 4) for k, v in turn_summary(episodes).items()}
    per_task = {g[0].task_name: f"{sum(any(t.info.get('correct') for t in ep.turns) for ep in g)}/{len(g)}"
                for g in groups}
    stops = Counter(str(ep.stop_reason) for ep in episodes)
    return {"checkpoint": checkpoint, **summary, "best_per_task": per_task, "stop_reasons": dict(stops),
            "generated_tokens": backend.generated_tokens, "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/grpo_demo_multiturn.yaml", help="GRPO config: env + sampling")
    parser.add_argument("--checkpoint", nargs="+", required=True)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8, help="episodes per task")
    parser.add_argument("--max-context-tokens", type=int, default=2048)
    parser.add_argument("--stts-window", type=int, default=None, help="STTS: keep the first prompt + this many best turns")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    cfg = load_config(GRPOConfig, Path(args.config), [f"generator.sampling.seed={args.seed}"])
    turns = TurnsConfig(max_turns=args.turns, max_context_tokens=args.max_context_tokens, stop_on="done")
    results = [asyncio.run(measure(cfg, ckpt, turns, args.samples, args.stts_window)) for ckpt in args.checkpoint]
    print(json.dumps({"bench": "multiturn_passrate", "turns": args.turns, "samples_per_task": args.samples,
                      "stts_window": args.stts_window, "sampling": cfg.generator.sampling.model_dump(),
                      "results": results, "machine": f"{os.cpu_count()}-core CPU"}))


if __name__ == "__main__":
    main()
