"""Pass rate of a checkpoint's sampled kernels on built-in tasks (how much room RL has to climb).

Samples ``--samples`` completions per task at ``--temperature`` with the transformers engine, from
the same prompts the GRPO app uses, extracts the code and evaluates it (Triton interpreter on
CPU). Prints one JSON line: overall pass rate, per-task passes, fault counts and timings.

    python -m bench.sft_passrate --checkpoint runs/sft/checkpoint --samples 8
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU here: interpret Triton (before torch imports it)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from actors.engines.hf_generation import HFGenerationEngine  # noqa: E402
from actors.engines.sampling import SamplingConfig  # noqa: E402
from apps.sft.data import prompt_token_ids  # noqa: E402
from forge_kernels.env import PromptConfig, extract_code, task_messages  # noqa: E402
from forge_kernels.eval.evaluator import Evaluator  # noqa: E402
from forge_kernels.eval.results import EvalOptions  # noqa: E402
from forge_kernels.tasks import load_builtin_tasks  # noqa: E402

ELEMENTWISE = ["add", "mul", "relu", "gelu", "sigmoid", "tanh", "silu", "leaky_relu"]


def measure(checkpoint: str, task_names: list[str], samples: int, temperature: float, max_tokens: int,
            seed: int, one_shot: bool) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    engine = HFGenerationEngine(AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32), tokenizer)
    tasks = load_builtin_tasks(levels=(1, 2, 3), names=task_names)
    prompt_cfg = PromptConfig(one_shot=one_shot)
    prompts = [prompt_token_ids(tokenizer, task_messages(t, prompt_cfg)) for t in tasks]
    start = time.perf_counter()
    completions = engine.generate(prompts, samples, SamplingConfig(temperature=temperature, max_tokens=max_tokens,
                                                                   seed=seed))
    gen_s = time.perf_counter() - start
    jobs = [(tasks[i // samples], c) for i, c in enumerate(completions)]
    start = time.perf_counter()
    with Evaluator(EvalOptions(device="cpu")) as evaluator, ThreadPoolExecutor(2) as pool:
        def judge(job):
            task, completion = job
            extracted = extract_code(completion.text)
            if not extracted.ok:
                return task.name, False, f"extract:{extracted.failure.value}"
            result = evaluator.evaluate(task, extracted.code)
            return task.name, result.correct, result.fault.value

        verdicts = list(pool.map(judge, jobs))
    eval_s = time.perf_counter() - start
    per_task = Counter(name for name, ok, _ in verdicts if ok)
    return {
        "bench": "sft_passrate",
        "checkpoint": checkpoint,
        "temperature": temperature,
        "samples_per_task": samples,
        "pass_rate": round(sum(ok for _, ok, _ in verdicts) / len(verdicts), 4),
        "per_task": {t.name: f"{per_task[t.name]}/{samples}" for t in tasks},
        "faults": dict(Counter(fault for _, _, fault in verdicts)),
        "stopped": sum(c.finish_reason == "stop" for c in completions),
        "mean_tokens": round(sum(len(c.token_ids) for c in completions) / len(completions), 1),
        "generate_s": round(gen_s, 2),
        "eval_s": round(eval_s, 2),
        "machine": f"{os.cpu_count()}-core CPU",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--tasks", nargs="+", default=[f"level1/{n}" for n in ELEMENTWISE])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-one-shot", action="store_true", help="prompts without the one-shot example")
    args = parser.parse_args()
    print(json.dumps(measure(args.checkpoint, args.tasks, args.samples, args.temperature, args.max_tokens,
                             args.seed, not args.no_one_shot)))


if __name__ == "__main__":
    main()
