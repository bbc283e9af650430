"""Wall time per evaluation: zygote fork vs a fresh Python process per evaluation.

    python -m bench.eval_overhead [--evals 8]

Prints one JSON line. Both paths run the same candidate request (a trivial correct ReLU kernel,
the same sandbox set-up and checks); the zygote path goes through ``Evaluator.evaluate`` (the
reference outputs are cached after the first call, as in training), the fresh path starts
``python`` and imports torch and triton for every evaluation, as KernelGym does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

from forge_kernels.eval import EvalOptions, Evaluator
from forge_kernels.eval.static_checks import analyze_source
from forge_kernels.eval.runner import run_fresh_process
from forge_kernels.tasks.task import Task

RELU_TASK = Task(
    name="bench/relu",
    level=1,
    source=(
        "import torch\nimport torch.nn as nn\nN = 1 << 20\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    return [torch.randn(N)]\n\ndef get_init_inputs():\n    return []\n"
    ),
    shapes={"cpu": {"N": 1024}},
)
RELU_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--evals", type=int, default=8, help="evaluations per path")
    args = parser.parse_args()
    options = EvalOptions(trials=3, timeout_s=300)
    with Evaluator(options) as ev:
        device = ev.resolve_device()
        start = time.monotonic()
        first = ev.evaluate(RELU_TASK, RELU_KERNEL)  # starts the zygote, fills the reference cache
        startup_s = time.monotonic() - start
        if not first.correct:
            raise SystemExit(f"benchmark kernel failed: {first.fault.value}: {first.error}")
        zygote_s, phases = [], []
        for _ in range(args.evals):
            r = ev.evaluate(RELU_TASK, RELU_KERNEL)
            assert r.correct, r.error
            zygote_s.append(r.wall_time_s)
            phases.append(r.phase_seconds)
        fresh_s = []
        static = analyze_source(RELU_KERNEL)
        reference, _ = ev.reference(RELU_TASK, options, device)
        assert reference is not None
        for _ in range(args.evals):  # the same request, jail included, in a fresh interpreter
            request = dataclasses.replace(
                ev.child_request(RELU_TASK, options, device, "candidate"), candidate_source=RELU_KERNEL,
                kernels={k: list(v) for k, v in static.kernels.items()},
                expected={s: [[o.meta["dtype"], o.meta["shape"]] for o in outs]
                          for (s, t), outs in reference.outputs.items() if t == 0})
            t0 = time.monotonic()
            report = run_fresh_process(request, ev._zygote_env(device), options.timeout_s)
            fresh_s.append(time.monotonic() - t0)
            assert report.finished, [f.header for f in report.frames if f.kind == "error"]
    z, f = statistics.median(zygote_s), statistics.median(fresh_s)
    print(json.dumps({
        "bench": "eval_overhead", "device": first.device, "cpus": os.cpu_count(), "evals": args.evals,
        "zygote_median_s": round(z, 4), "fresh_process_median_s": round(f, 4), "ratio": round(f / z, 2),
        "zygote_startup_s": round(startup_s, 2),
        "zygote_phase_median_s": {k: round(statistics.median(p.get(k, 0.0) for p in phases), 4)
                                  for k in phases[0]},
    }))


if __name__ == "__main__":
    main()
